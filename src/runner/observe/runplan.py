"""The run plan: what a run is about to do, printed at its start and kept in TensorBoard."""

from pathlib import Path

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
) -> str:
    batch_size, accumulate = config.data.batch_size, config.accumulate
    precision_line = precision.used
    if precision.fallback_reason:
        precision_line += f" (requested {precision.requested}: {precision.fallback_reason})"
    clip = config.clip
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
        ("optimizer steps", f"{total_steps} planned ({steps_per_epoch} per epoch; {limits})"),
        ("clip", f"max grad norm {clip:g}, after backward" if clip else "off (norms still logged)"),
        ("checkpoints", checkpoint_plan(config.checkpoint, run_dir)),
        ("speed", "; ".join(speed_notes)),
        *([("resumed from", resumed_from)] if resumed_from else []),
        ("run dir", str(run_dir)),
        ("watch", f"tensorboard --logdir {run_dir}"),
    ]
    return "run plan\n" + "\n".join(f"  {name:<16} {value}" for name, value in rows)
