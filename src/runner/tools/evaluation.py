"""``runner eval``: a checkpoint's validation (or test) metrics, every configured metric, with the model
and data rebuilt from the config stored in it. When the run averaged its weights (``ema``), those are
what is evaluated."""

from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

from runner.checkpoint.files import is_sharded_folder, load_checkpoint
from runner.checkpoint.trainable import load_weights
from runner.config.errors import ConfigError
from runner.config.trust import check_config_from_file, check_saved_resolved
from runner.config.typed import as_dict, typed_config
from runner.data.loading import make_loader
from runner.experiment.setup import Build, build_collate_fn, build_model_and_data, build_named, worker_limit
from runner.training.device import resolve_device
from runner.training.precision import resolve_precision
from runner.training.seeding import seeded
from runner.training.validation import evaluate

SPLITS = ("val", "test")


def evaluate_checkpoint(
    path: Path, device_name: str, build: Build, split: str = "val", trusted: Set[str] = frozenset()
) -> dict[str, Any]:
    """``trusted``: the ``_target_``s the checkpoint's config may name (it names code to run: a file
    from elsewhere must not run any the user did not name)."""
    checkpoint = load_checkpoint(path)
    if is_sharded_folder(path):  # strategy=fsdp's: its shards read whole, in this one process
        from runner.checkpoint.sharded import consolidated

        checkpoint = consolidated(path, checkpoint)
    stored = checkpoint.get("config")
    if not isinstance(stored, Mapping):
        raise ConfigError(f"checkpoint {path} holds no run config; eval rebuilds the model and data from it")
    check_saved_resolved(stored, f"checkpoint {path}")  # before anything resolves it
    config = typed_config(stored)
    # As it is built: resolved once; an interpolation (${oc.create:...}) can make a _target_.
    check_config_from_file(
        as_dict(config), trusted, f"checkpoint {path}", "allow them with allow_targets={targets}"
    )
    device = resolve_device(device_name)
    with seeded(checkpoint["seed"]):  # as the run built them: a random base it froze is the one it trained on
        parts = build_model_and_data(config, build, device)
    dataset = parts.val_set if split == "val" else parts.test_set
    if dataset is None:
        raise ConfigError(
            f"split={split}, but data.dataset._target_={config.data.dataset['_target_']} returns no test "
            "set; it must return (train, val, test) for split=test"
        )
    weights = checkpoint.get("averaged_model_state_dict") or checkpoint["model_state_dict"]
    load_weights(parts.model, weights, checkpoint, path)  # a trainable-only one's base checked (trainable.py)
    loader = make_loader(
        dataset, config.data.val_batch_size or config.data.batch_size, seed=0,
        # The checkpoint's number of workers, up to what this machine takes: eval has no setting for it.
        pin_memory=device.type == "cuda", num_workers=min(config.data.num_workers, worker_limit()),
        collate_fn=build_collate_fn(build, config, validation=True),  # data.val_collate_fn
    )  # fmt: skip
    precision = resolve_precision(config.precision, device, suggest=False)
    metrics = evaluate(
        parts.model, loader, parts.loss_fn, device, precision, channels_last=False,
        metrics=build_named(build, "metrics", config.metrics), target_key=config.data.target_key,
    )  # fmt: skip
    metrics = {name.replace("val/", f"{split}/", 1): value for name, value in metrics.items()}
    averaged = {"weights": "averaged"} if "averaged_model_state_dict" in checkpoint else {}
    return {"checkpoint": str(path), "step": checkpoint["global_step"], "epoch": checkpoint["epoch"],
            **metrics, **averaged}  # fmt: skip
