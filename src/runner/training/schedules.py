"""Learning-rate schedules: the named ones (stepped once per optimizer step, with an optional linear
warmup), and when any scheduler steps (:class:`Schedule`)."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from runner.config.errors import ConfigError


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


# What the named schedules' keys mean when a config leaves them out.
NAMED_DEFAULTS = {"warmup_steps": 0, "min_lr": 0.0, "step_size": 100, "gamma": 0.1}


def named_schedule(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A named schedule's settings (``name`` and :data:`NAMED_DEFAULTS`' keys), defaults filled in."""
    return {**NAMED_DEFAULTS, **{key: spec[key] for key in ("name", *NAMED_DEFAULTS) if key in spec}}


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


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """transformers' ``get_linear_schedule_with_warmup``: from 0 up to the optimizer's rate over
    ``warmup_steps``, then linearly down to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return LambdaLR(optimizer, factor)


@dataclass
class Schedule:
    """When a scheduler steps: after every optimizer step (``interval=step``), after every epoch
    (``interval=epoch``), or, with ``monitor`` (``ReduceLROnPlateau``), after every validation with
    that metric's value."""

    scheduler: Any
    interval: str = "step"
    monitor: str | None = None

    def after_step(self) -> None:
        if self.interval == "step" and self.monitor is None:
            self.scheduler.step()

    def after_epoch(self) -> None:
        if self.interval == "epoch" and self.monitor is None:
            self.scheduler.step()

    def after_validation(self, metrics: Mapping[str, float]) -> None:
        if self.monitor is not None:
            self.scheduler.step(metrics[self.monitor])

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.scheduler.load_state_dict(state_dict)


def fill_planned(spec: Mapping[str, Any], planned: Mapping[str, int | None]) -> dict[str, Any]:
    """A scheduler config with ``${total_steps}`` and ``${steps_per_epoch}`` replaced by the run's
    planned values."""
    filled = {}
    for key, value in spec.items():
        for name, number in planned.items():
            placeholder = "${" + name + "}"
            if isinstance(value, str) and placeholder in value:
                if value != placeholder:
                    raise ConfigError(f"scheduler.{key}={value}: {placeholder} must be the whole value")
                if number is None:
                    raise ConfigError(
                        f"scheduler.{key}={value}: a stream (IterableDataset) has no {name}; "
                        "use trainer.max_steps (${total_steps}) or a number"
                    )
                value = number
        filled[key] = value
    return filled
