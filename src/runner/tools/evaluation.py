"""``runner eval``: a checkpoint's validation metrics, rebuilt from the config stored in it."""

from pathlib import Path
from typing import Any

from runner.checkpoint.files import check_state_dict_fits, load_checkpoint
from runner.config.typed import typed_config
from runner.data.loading import make_loaders
from runner.experiment.setup import Build, build_model_and_data
from runner.training.device import resolve_device
from runner.training.precision import resolve_precision
from runner.training.validation import evaluate


def evaluate_checkpoint(path: Path, device_name: str, build: Build) -> dict[str, Any]:
    checkpoint = load_checkpoint(path)
    config = typed_config(checkpoint["config"])
    device = resolve_device(device_name)
    parts = build_model_and_data(config, build, device)
    check_state_dict_fits(parts.model, checkpoint["model_state_dict"], path)
    parts.model.load_state_dict(checkpoint["model_state_dict"])
    _, val_loader, _ = make_loaders(
        parts.train_set, parts.val_set, config.data.batch_size, False, config.data.num_workers, 0,
        pin_memory=device.type == "cuda",
    )  # fmt: skip
    precision = resolve_precision(config.precision, device)
    metrics = evaluate(parts.model, val_loader, parts.loss_fn, device, precision)
    return {
        "checkpoint": str(path),
        "step": checkpoint["global_step"],
        "epoch": checkpoint["epoch"],
        **metrics,
    }
