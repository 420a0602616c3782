"""Learning-rate schedules: the named ones (stepped once per optimizer step, with an optional linear
warmup), and when any scheduler steps (:class:`Schedule`)."""

import inspect
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
    that metric's value. A scheduler that is told the counts (``counted``: timm's, whose ``step`` needs
    the epoch) is driven as timm's ``train.py`` drives it: ``step_update(num_updates=...)`` after every
    optimizer step, ``step(epoch, metric)`` after every epoch, with ``monitor``'s latest value if set."""

    scheduler: Any
    interval: str = "step"
    monitor: str | None = None
    counted: bool = False

    def after_step(self, updates: int) -> None:
        """``updates``: the optimizer steps done, this one included."""
        if self.counted:
            self.scheduler.step_update(num_updates=updates)
        elif self.interval == "step" and self.monitor is None:
            self.scheduler.step()

    def after_epoch(self, epochs: int, metrics: Mapping[str, float] | None = None) -> None:
        """``epochs``: the epochs done, this one included (timm's ``epoch + 1``)."""
        if self.counted:
            value = (metrics or {}).get(self.monitor) if self.monitor else None
            self.scheduler.step(epochs, value)
        elif self.interval == "epoch" and self.monitor is None:
            self.scheduler.step()

    def after_validation(self, metrics: Mapping[str, float]) -> None:
        if self.monitor is not None and not self.counted:
            self.scheduler.step(metrics[self.monitor])

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.scheduler.load_state_dict(state_dict)


def step_needs(scheduler: Any) -> list[str]:
    """The arguments the scheduler's ``step`` cannot do without (no default): none for torch's
    schedulers, the metric for ``ReduceLROnPlateau``, the epoch for timm's."""
    try:
        parameters = inspect.signature(scheduler.step).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called as torch's are
        return []
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in plain and p.default is inspect.Parameter.empty]


def schedule_of(scheduler: Any, target: str, interval: str, monitor: str | None) -> Schedule:
    """How a ``_target_`` scheduler is stepped, from what its ``step`` needs; a ``step`` runner cannot
    call as its library does is refused in one line, before the run writes anything."""
    needs = step_needs(scheduler)
    plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if plateau:
        return Schedule(scheduler, interval, monitor or "val/loss")
    if not needs:
        return Schedule(scheduler, interval, monitor)
    if len(needs) == 1 and callable(getattr(scheduler, "step_update", None)):
        if interval != "step":
            raise ConfigError(
                f"scheduler.interval={interval}: {target} is stepped as timm's loop steps it (per update "
                "and per epoch; its t_in_epochs chooses which moves the rate); leave scheduler.interval out"
            )
        return Schedule(scheduler, interval, monitor, counted=True)
    if len(needs) == 1 and monitor is not None:
        return Schedule(scheduler, interval, monitor)
    raise ConfigError(
        f"scheduler._target_={target}: its step() needs {', '.join(needs)}, which runner can give only "
        "to step(metric) after each validation (set scheduler.monitor, e.g. val/loss) or to timm's "
        "step(epoch) with step_update(num_updates); a scheduler whose step() takes nothing steps as torch's"
    )


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
