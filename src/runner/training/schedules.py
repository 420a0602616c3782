"""Learning-rate schedules, stepped once per optimizer step, with an optional linear warmup."""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def lr_factor(
    step: int,
    name: str,
    total_steps: int,
    warmup_steps: int = 0,
    min_lr_ratio: float = 0.0,
    step_size: int = 100,
    gamma: float = 0.1,
) -> float:
    """Multiplier of the base learning rate after ``step`` optimizer steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if name == "cosine":
        decay_steps = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / decay_steps)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if name == "step":
        return gamma ** ((step - warmup_steps) // step_size)
    return 1.0


class ConstantLR:
    """``scheduler=none`` without warmup: the learning rate never changes, so stepping is free."""

    def step(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    name: str,
    total_steps: int,
    warmup_steps: int,
    min_lr: float,
    step_size: int,
    gamma: float,
) -> LambdaLR | ConstantLR:
    """A ``LambdaLR`` over :func:`lr_factor` (its state, the step count, saves and restores), or
    nothing to do when the rate is constant."""
    if name == "none" and warmup_steps == 0:
        return ConstantLR()
    base_lr = optimizer.param_groups[0]["lr"]
    min_lr_ratio = min_lr / base_lr if base_lr > 0 else 0.0
    return LambdaLR(
        optimizer,
        lambda step: lr_factor(step, name, total_steps, warmup_steps, min_lr_ratio, step_size, gamma),
    )
