"""``runner lr_find``: the learning-rate exercise (raise the rate until the loss goes unstable) as a
tool. It trains a throw-away copy of the configured initial model with an exponentially rising
learning rate, stops when the loss diverges, and suggests a rate; nothing is saved but the curve."""

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

import numpy as np
import torch
from torch import nn

from runner.checkpoint.durable import atomic_write, writing
from runner.config.errors import UserError
from runner.experiment.optimizers import chosen_step
from runner.observe.writer import TensorBoardLogger
from runner.training.modes import set_apart, start_training
from runner.training.named_optimizers import NamedOptimizers
from runner.training.precision import Precision
from runner.training.step import Learner


@dataclass
class LrCurve:
    lrs: list[float]
    losses: list[float]  # smoothed
    suggestion: float | None
    diverged_at: float | None


def find_lr(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    loss_fn: Callable,
    train_loader,
    device: torch.device,
    precision: Precision,
    clip: float | None,
    target_key: str,
    min_lr: float = 1e-6,
    max_lr: float = 10.0,
    num_steps: int = 100,
    smoothing: float = 0.1,
    diverge_factor: float = 4.0,
) -> LrCurve:
    """The run's own training step at each rate, on a copy of the model; the loss of each step is the
    one before its update."""
    model = copy.deepcopy(model)
    start_training(model, set_apart(model))  # as the run starts (training/modes.py)
    model.zero_grad(set_to_none=True)
    optimizer = make_optimizer(model)
    learner = Learner(
        model, loss_fn, optimizer, precision, device, False, target_key, step=chosen_step(optimizer)
    )
    if isinstance(learner.optimizer, NamedOptimizers) and len(learner.optimizer.optimizers) > 1:
        raise UserError(
            f"lr_find: optimizers {', '.join(learner.optimizer.optimizers)} each have a rate, and the "
            "model's own step has no one loss to choose them by; set optimizers.<name>.lr yourself"
        )
    growth = (max_lr / min_lr) ** (1 / max(num_steps - 1, 1))
    lrs, losses = [], []
    average, best, diverged_at = 0.0, math.inf, None
    batches = cycle(train_loader)
    for index in range(num_steps):
        lr = min_lr * growth**index
        for group in learner.optimizer.param_groups:
            group["lr"] = lr
        value = learner.step.train(learner, [next(batches)], clip).loss.item()
        if not math.isfinite(value):
            diverged_at = lr
            break
        average = smoothing * value + (1 - smoothing) * average
        smoothed = average / (1 - (1 - smoothing) ** (index + 1))  # bias-corrected running mean
        lrs.append(lr)
        losses.append(smoothed)
        best = min(best, smoothed)
        if smoothed > diverge_factor * best:
            diverged_at = lr
            break
    return LrCurve(lrs, losses, suggest(lrs, losses), diverged_at)


def suggest(lrs: list[float], losses: list[float]) -> float | None:
    """The rate where the loss falls fastest (steepest slope against log lr), before its minimum."""
    if len(losses) < 5:
        return None
    end = int(np.argmin(losses)) + 1
    if end < 3:
        return None
    slopes = np.gradient(np.array(losses[:end]), np.log(np.array(lrs[:end])))
    return float(lrs[int(np.argmin(slopes))])


def record(curve: LrCurve, run_dir: Path) -> Path | None:
    """The curve to TensorBoard (``lr_find/loss`` against step, ``lr_find/lr``) and, where matplotlib is
    installed, as a PNG plot (its path is returned). A write the machine refuses (a full disk) is a
    ``WriteError``."""
    logger = TensorBoardLogger(run_dir)
    for step, (lr, loss) in enumerate(zip(curve.lrs, curve.losses, strict=True), start=1):
        logger.log_scalars(step, {"lr_find/loss": loss, "lr_find/lr": lr})
    logger.close()
    path = run_dir / "lr_find.png"
    try:
        import matplotlib
    except ImportError:
        return None  # the curve is in TensorBoard; the plot needs matplotlib (pip install 'runner[sweeps]')

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.plot(curve.lrs, curve.losses)
    if curve.suggestion is not None:
        index = curve.lrs.index(curve.suggestion)
        axes.plot(
            [curve.suggestion],
            [curve.losses[index]],
            "o",
            color="red",
            label=f"suggested optimizer.lr={curve.suggestion:.2g}",
        )
        axes.legend()
    axes.set_xscale("log")
    axes.set_xlabel("learning rate")
    axes.set_ylabel("training loss (smoothed)")
    axes.set_title("learning-rate range test")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    try:  # whole or not at all: a full disk leaves no 0-byte or half plot
        with writing(path):
            atomic_write(path, lambda handle: figure.savefig(handle, format="png", dpi=100))
    finally:
        plt.close(figure)
    return path
