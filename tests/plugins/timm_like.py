"""Stand-ins with the interface of timm's schedulers (timm/scheduler/scheduler.py and cosine_lr.py, timm
1.0): ``step(epoch, metric=None)`` after each epoch, ``step_update(num_updates, metric=None)`` after each
optimizer step, the rate set from the counts the loop passes. timm itself imports torchvision, whose
PyPI wheels need a CUDA torch; where it imports, the tests run timm's own class too. Also schedulers whose
``step`` runner cannot call, for the one-line refusals."""

import math
from typing import Any

import torch


class Scheduler:
    """timm's ``Scheduler`` base without its noise: the rate is a function of the count passed in."""

    def __init__(self, optimizer: torch.optim.Optimizer, t_in_epochs: bool = True) -> None:
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_values = [group["initial_lr"] for group in optimizer.param_groups]
        self.metric = None
        self.t_in_epochs = t_in_epochs
        self.update_groups(self.base_values)

    def state_dict(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)

    def _get_values(self, t: int, on_epoch: bool = True) -> list[float] | None:
        if on_epoch != self.t_in_epochs:
            return None
        return self._get_lr(t)

    def step(self, epoch: int, metric: float | None = None) -> None:
        self.metric = metric
        if (values := self._get_values(epoch, on_epoch=True)) is not None:
            self.update_groups(values)

    def step_update(self, num_updates: int, metric: float | None = None) -> None:
        self.metric = metric
        if (values := self._get_values(num_updates, on_epoch=False)) is not None:
            self.update_groups(values)

    def update_groups(self, values: float | list[float]) -> None:
        if not isinstance(values, list | tuple):
            values = [values] * len(self.optimizer.param_groups)
        for group, value in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = value


class CosineLRScheduler(Scheduler):
    """timm's ``CosineLRScheduler`` for one cycle: linear warmup from ``warmup_lr_init`` over
    ``warmup_t``, then cosine from the base rate to ``lr_min`` at ``t_initial``."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        t_initial: int,
        lr_min: float = 0.0,
        warmup_t: int = 0,
        warmup_lr_init: float = 0.0,
        t_in_epochs: bool = True,
    ) -> None:
        super().__init__(optimizer, t_in_epochs=t_in_epochs)
        self.t_initial, self.lr_min = t_initial, lr_min
        self.warmup_t, self.warmup_lr_init = warmup_t, warmup_lr_init
        if warmup_t:
            self.warmup_steps = [(v - warmup_lr_init) / warmup_t for v in self.base_values]
            super().update_groups(warmup_lr_init)
        else:
            self.warmup_steps = [1 for _ in self.base_values]

    def _get_lr(self, t: int) -> list[float]:
        if t < self.warmup_t:
            return [self.warmup_lr_init + t * s for s in self.warmup_steps]
        if t >= self.t_initial:
            return [self.lr_min for _ in self.base_values]
        return [
            self.lr_min + 0.5 * (base - self.lr_min) * (1 + math.cos(math.pi * t / self.t_initial))
            for base in self.base_values
        ]


class EpochOnly:
    """A ``step`` that needs the epoch, and no ``step_update``: not a protocol runner knows."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def step(self, epoch: int) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = 0.01 / (1 + epoch)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class HalvedOnCall:
    """A plateau-like scheduler of another library: ``step(metric)`` halves the rate when the metric
    did not improve by 10%."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.best = optimizer, math.inf

    def step(self, metric: float) -> None:
        if metric > 0.9 * self.best:
            for group in self.optimizer.param_groups:
                group["lr"] /= 2
        self.best = min(self.best, metric)

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best = state_dict["best"]
