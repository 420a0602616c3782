"""One training run: set up from a validated config, build, print the plan, fit, record.

Hydra-free: ``_target_`` configs become objects through the ``build`` function handed in
(Hydra's ``instantiate`` in the app), so a run can also be started from plain Python.
"""

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

import runner
from runner.checks import ConfigError, show
from runner.data.loading import make_loaders
from runner.device import resolve_device
from runner.engine import LoopSettings, fit, planned_steps
from runner.metrics import TensorBoardLogger
from runner.precision import Precision, resolve_precision
from runner.schedules import build_scheduler
from runner.seeding import draw_seed, seed_everything

log = logging.getLogger("runner")


def build_component(build: Callable[..., Any], key: str, spec: dict, *args: Any) -> Any:
    """Build one ``_target_`` config, turning any failure into an error that names the key."""
    try:
        return build(spec, *args)
    except Exception as error:  # an import or constructor failure in user code
        cause = error
        while cause.__cause__ is not None:  # Hydra wraps the error that says what went wrong
            cause = cause.__cause__
        reason = f"{type(cause).__name__}: {cause}".splitlines()[0]
        raise ConfigError(
            f"{key}._target_={show(spec.get('_target_'))} could not be built ({reason}); "
            f"{key}._target_ must be an importable dotted path to a callable that accepts "
            "the other keys as arguments"
        ) from None


def loop_settings(config: dict) -> LoopSettings:
    trainer = config["trainer"]
    return LoopSettings(
        max_steps=trainer["max_steps"],
        max_epochs=trainer["max_epochs"],
        micro_batches_per_step=config["accumulate"],
        clip_norm=config["clip"],
        log_every_n_steps=trainer["log_every_n_steps"],
        val_every_n_epochs=trainer["val_every_n_epochs"],
        val_every_n_steps=trainer["val_every_n_steps"],
    )


def run_plan(
    config: dict,
    device: torch.device,
    precision: Precision,
    seed: int,
    total_steps: int,
    steps_per_epoch: int,
    run_dir: Path,
    world_size: int = 1,
) -> str:
    batch_size, accumulate = config["data"]["batch_size"], config["accumulate"]
    precision_line = precision.used
    if precision.fallback_reason:
        precision_line += f" (requested {precision.requested}: {precision.fallback_reason})"
    clip = config["clip"]
    trainer = config["trainer"]
    limits = f"max_steps={show(trainer['max_steps'])}, max_epochs={show(trainer['max_epochs'])}"
    rows = [
        ("device", str(device)),
        ("precision", precision_line),
        ("seed", str(seed) + (" (drawn)" if config["seed"] is None else "")),
        (
            "effective batch",
            f"{batch_size * accumulate * world_size} = {batch_size} (data.batch_size) x "
            f"{accumulate} (accumulate) x {world_size} (world size)",
        ),
        ("optimizer steps", f"{total_steps} planned ({steps_per_epoch} per epoch; {limits})"),
        ("clip", f"max grad norm {clip:g}, after backward" if clip else "off (norms still logged)"),
        ("checkpoints", "none"),
        ("run dir", str(run_dir)),
        ("watch", f"tensorboard --logdir {run_dir}"),
    ]
    return "run plan\n" + "\n".join(f"  {name:<16} {value}" for name, value in rows)


def record_split(run_dir: Path, train_set: Any, val_set: Any) -> None:
    """Keep the train/val split with the run, so the run can be repeated on the same data."""
    split = {"train_size": len(train_set), "val_size": len(val_set)}
    for name, dataset in (("train", train_set), ("val", val_set)):
        if hasattr(dataset, "indices"):
            split[f"{name}_indices"] = [int(index) for index in dataset.indices]
    (run_dir / "data_split.json").write_text(json.dumps(split))


def train(config: dict, run_dir: Path, build: Callable[..., Any]) -> float | None:
    """Run one experiment; return the best validation loss (what sweepers minimise)."""
    device = resolve_device(config["device"])
    seed = draw_seed() if config["seed"] is None else config["seed"]
    seed_everything(seed, config["deterministic"])
    precision = resolve_precision(config["precision"], device)

    model = build_component(build, "model", config["model"])
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model._target_={config['model']['_target_']} built a {type(model).__name__}, "
            "not a torch.nn.Module"
        )
    model = model.to(device)
    datasets = build_component(build, "data.dataset", config["data"]["dataset"])
    if not (isinstance(datasets, tuple | list) and len(datasets) == 2):
        raise ConfigError(
            f"data.dataset._target_={config['data']['dataset']['_target_']} must return "
            "(train_dataset, val_dataset)"
        )
    train_set, val_set = datasets
    loss_fn = build_component(build, "loss", config["loss"])
    optimizer = build_component(build, "optimizer", config["optimizer"], model.parameters())

    data = config["data"]
    train_loader, val_loader, train_sampler = make_loaders(
        train_set, val_set, data["batch_size"], data["shuffle"], data["num_workers"], seed,
        pin_memory=device.type == "cuda",
    )  # fmt: skip
    settings = loop_settings(config)
    total_steps = planned_steps(settings, len(train_loader))
    scheduler_config = config["scheduler"]
    scheduler = build_scheduler(optimizer, total_steps=total_steps, **scheduler_config)

    # Everything is built: from here on the run writes into its directory.
    plan = run_plan(
        config, device, precision, seed, total_steps,
        math.ceil(len(train_loader) / settings.micro_batches_per_step), run_dir,
    )  # fmt: skip
    log.info(plan)
    runtime = {
        "device": str(device),
        "precision_requested": precision.requested,
        "precision_used": precision.used,
        "seed": seed,
        "world_size": 1,
        "effective_batch_size": data["batch_size"] * config["accumulate"],
        "planned_steps": total_steps,
        "runner_version": runner.__version__,
        "torch_version": str(torch.__version__),
    }
    (run_dir / "run.yaml").write_text(yaml.safe_dump({**config, "runtime": runtime}, sort_keys=False))
    record_split(run_dir, train_set, val_set)
    logger = TensorBoardLogger(run_dir)
    logger.log_text("run/plan", plan)
    try:
        state = fit(
            model, optimizer, scheduler, loss_fn, train_loader, train_sampler, val_loader,
            device, precision, settings, logger,
        )  # fmt: skip
    finally:
        logger.close()
    summary = {"step": state.step, "epoch": state.epoch, **state.last_val}
    log.info(
        "done: %s | best val/loss %s at step %s",
        " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()),
        f"{state.best_val_loss:.4g}" if state.best_val_loss is not None else "n/a",
        state.best_val_step,
    )
    return state.best_val_loss
