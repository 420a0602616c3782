"""The run plan: what a run is about to do, printed at its start and kept in TensorBoard."""

from pathlib import Path
from typing import Any

import torch

from runner.checkpoint.files import CHECKPOINT_DIR
from runner.config.errors import show
from runner.config.schema import CheckpointConfig, RunConfig
from runner.training.precision import Precision


def checkpoint_plan(policy: CheckpointConfig, run_dir: Path) -> str:
    if not policy.enabled:
        return "none (checkpoint.enabled=false: a stopped run cannot be resumed)"
    cadences = (("step", policy.every_n_steps), ("epoch", policy.every_n_epochs))
    cadence = [
        f"every {unit}" if every == 1 else f"every {every} {unit}s" for unit, every in cadences if every
    ]
    best = f", best.pt on {policy.monitor} ({policy.mode})" if policy.save_best else ""
    return (
        f"{' and '.join(cadence) or 'no periodic saves'} (newest {policy.keep_last} kept){best}, "
        f"last.pt at the end -> {run_dir / CHECKPOINT_DIR}"
    )


def parameter_groups(optimizer: torch.optim.Optimizer) -> str:
    """Each group's tensors and parameters, and its weight decay: what ``optimizer.no_decay`` did."""
    groups = []
    for index, group in enumerate(optimizer.param_groups):
        tensors, count = len(group["params"]), sum(p.numel() for p in group["params"])
        decay = f", weight_decay {group['weight_decay']:g}" if "weight_decay" in group else ""
        groups.append(f"{group.get('name', index)}: {tensors} tensors, {count:,} parameters{decay}")
    return "; ".join(groups)


def schedule_plan(scheduler: dict[str, Any]) -> str:
    if "_target_" not in scheduler:
        warmup = scheduler.get("warmup_steps", 0)
        return f"{scheduler['name']}, per optimizer step" + (f", {warmup} warmup steps" if warmup else "")
    if scheduler.get("monitor"):
        return f"{scheduler['_target_']}, after each validation on {scheduler['monitor']}"
    interval = scheduler.get("interval", "step")
    return f"{scheduler['_target_']}, per {'optimizer step' if interval == 'step' else 'epoch'}"


def run_plan(
    config: RunConfig,
    device: torch.device,
    precision: Precision,
    seed: int,
    total_steps: int,
    steps_per_epoch: int,
    run_dir: Path,
    resumed_from: str | None,
    speed_notes: list[str],
    world_size: int = 1,
    optimizer: torch.optim.Optimizer | None = None,
    train_set: Any = None,
) -> str:
    batch_size, accumulate = config.data.batch_size, config.accumulate
    precision_line = precision.used
    if precision.fallback_reason:
        precision_line += f" (requested {precision.requested}: {precision.fallback_reason})"
    clip = config.clip
    per_epoch = (
        f"{steps_per_epoch} per epoch" if steps_per_epoch is not None
        else f"the data is a stream ({type(train_set).__name__}): epochs are passes over it"
    )  # fmt: skip
    limits = f"max_steps={show(config.trainer.max_steps)}, max_epochs={show(config.trainer.max_epochs)}"
    rows = [
        ("device", str(device)),
        ("precision", precision_line),
        ("seed", str(seed) + (" (drawn)" if config.seed is None else "")),
        (
            "effective batch",
            f"{batch_size * accumulate * world_size} = {batch_size} (data.batch_size) x "
            f"{accumulate} (accumulate) x {world_size} (world size)",
        ),
        ("optimizer steps", f"{total_steps} planned ({per_epoch}; {limits})"),
        *([("parameter groups", parameter_groups(optimizer))] if optimizer is not None else []),
        ("schedule", schedule_plan(config.scheduler)),
        *([("metrics", ", ".join(f"val/{name}" for name in config.metrics))] if config.metrics else []),
        *([("callbacks", ", ".join(config.callbacks))] if config.callbacks else []),
        ("clip", f"max grad norm {clip:g}, after backward" if clip else "off (norms still logged)"),
        ("checkpoints", checkpoint_plan(config.checkpoint, run_dir)),
        ("speed", "; ".join(speed_notes)),
        *([("resumed from", resumed_from)] if resumed_from else []),
        ("run dir", str(run_dir)),
        ("watch", f"tensorboard --logdir {run_dir}"),
    ]
    return "run plan\n" + "\n".join(f"  {name:<16} {value}" for name, value in rows)
