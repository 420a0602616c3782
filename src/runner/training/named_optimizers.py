"""Several optimizers, each over a named part of the model (``optimizers:`` in the config), and their
schedulers: where the loop, the checkpoint and the logs see one optimizer and one scheduler, these
stand for all of them, by name."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from runner.config.errors import UserError


@dataclass
class NamedOptimizers:
    """Each optimizer's parameter groups are named after it (``generator``; ``generator/<group>``
    where it has several), so the loop logs each one's rate as ``train/lr/<name>``."""

    optimizers: dict[str, torch.optim.Optimizer]
    clips: dict[str, float | None]  # each one's max gradient norm (None: no clipping)
    scheduler_specs: dict[str, Mapping[str, Any]]  # each one's scheduler config

    def __post_init__(self) -> None:
        for name, optimizer in self.optimizers.items():
            groups = optimizer.param_groups
            for index, group in enumerate(groups):
                group["name"] = name if len(groups) == 1 else f"{name}/{group.get('name', index)}"

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [group for optimizer in self.optimizers.values() for group in optimizer.param_groups]

    def optimizer(self, name: str) -> torch.optim.Optimizer:
        if name not in self.optimizers:
            raise UserError(
                f"the model's training_step named the optimizer {name!r} (in step.backward or step.update), "
                f"and there is none of that name; the config's optimizers are {', '.join(self.optimizers)}"
            )
        return self.optimizers[name]

    def trainable(self, *names: str) -> list[torch.Tensor]:
        """The trainable parameters of the optimizers named (of all of them when none is)."""
        chosen = [self.optimizer(name) for name in names] or list(self.optimizers.values())
        return [p for optimizer in chosen for group in optimizer.param_groups for p in group["params"]
                if p.requires_grad]  # fmt: skip

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """Every optimizer's step (doctor's check that a step changes the parameters)."""
        for optimizer in self.optimizers.values():
            optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {name: optimizer.state_dict() for name, optimizer in self.optimizers.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if "param_groups" in state_dict:  # one optimizer's own state: a run of runner's own step
            raise ValueError(
                "it holds one optimizer's state, saved by runner's own step; this run's model writes its "
                f"own step (training_step) with optimizers {', '.join(self.optimizers)}, by name: resume it "
                "with the model that saved it"
            )
        if set(state_dict) != set(self.optimizers):
            raise ValueError(
                f"it holds optimizers {', '.join(map(str, state_dict)) or 'none by name'}; this run has "
                f"{', '.join(self.optimizers)}"
            )
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state_dict[name])


@dataclass
class NamedSchedulers:
    """One scheduler per named optimizer, stepped together; their states saved by name."""

    schedulers: dict[str, Any]

    def step(self, *counts_or_metric: float | None) -> None:
        for scheduler in self.schedulers.values():
            scheduler.step(*counts_or_metric)

    def step_update(self, num_updates: int) -> None:
        """timm's schedulers (schedules.py), each told the update count."""
        for scheduler in self.schedulers.values():
            scheduler.step_update(num_updates=num_updates)

    def state_dict(self) -> dict[str, Any]:
        return {name: scheduler.state_dict() for name, scheduler in self.schedulers.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        for name, scheduler in self.schedulers.items():
            scheduler.load_state_dict(state_dict[name])
