"""Callbacks: code of the user's that runs at fixed points of the loop. A callback is any object; each
hook is optional: ``on_train_start``, ``on_step_end``, ``on_validation_end``, ``on_epoch_end``,
``on_train_end``, each called with a :class:`Context`. A callback's ``state_dict``/``load_state_dict``
(when it has them) go into checkpoints, so a resumed run continues it exactly. A callback's ``monitor``
attribute (a metric name, as :class:`EarlyStopping` has) is checked after each validation like
``checkpoint.monitor``: a metric the validation does not give ends the run with one line naming it.

A callback that defines ``evaluation_weights(model)`` (a context manager) puts other weights in the
model while it is validated (:class:`EMA`); ``averaged_state_dict(model)`` gives them to checkpoints
for ``eval``.
"""

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from runner.config.errors import UserError
from runner.training.batches import map_tensors
from runner.training.validation import improves

HOOKS = ("on_train_start", "on_step_end", "on_validation_end", "on_epoch_end", "on_train_end")


class NotAScalar(UserError):
    """``context.log`` was given something that is not one number (an image, a whole tensor)."""


@dataclass
class Context:
    """What a hook sees: where the run stands, the latest metrics, the model and optimizer, a way to
    log TensorBoard scalars and a way to end the run. In ``on_step_end``, also the step's last
    micro-batch (on the device) and the model's outputs for it (detached); None in other hooks."""

    model: nn.Module  # the plain module (never a DDP or compiled wrapper)
    optimizer: torch.optim.Optimizer
    log_scalar: Callable[[str, float, int], None]
    step: int = 0
    epoch: int = 0
    metrics: dict[str, float] = field(default_factory=dict)  # latest train/* and val/* values
    stop_reason: str | None = None
    batch: Any = None
    outputs: Any = None
    # True in on_validation_end for the validation a run adds when it ends between two of its cadence's
    # (max_steps mid-epoch): a callback that counts validations (patience) leaves this one out, so a
    # run continued with a longer limit equals one never stopped.
    extra_validation: bool = False

    def log(self, tag: str, value: float | int | torch.Tensor) -> None:
        """A TensorBoard scalar at the current optimizer step: a number, or a tensor of one element
        (detached and read here)."""
        self.log_scalar(tag, scalar_value(tag, value), self.step)

    def request_stop(self, reason: str) -> None:
        """End the run after this hook: a final checkpoint is written, and ``reason`` is reported."""
        self.stop_reason = reason


def scalar_value(tag: str, value: Any) -> float:
    """One number from a number, a one-element tensor (detached first: no autograd warning) or
    anything ``float()`` takes (a numpy scalar)."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return float(value.detach().reshape(()).item())
        given = f"a tensor of shape {tuple(value.shape)}"
    else:
        try:
            return float(value)
        except (TypeError, ValueError):
            shape = getattr(value, "shape", None)
            given = f"a {type(value).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")
    raise NotAScalar(
        f"context.log({tag!r}, ...) takes one number (a TensorBoard scalar), not {given}; images and "
        "other tensors are not scalars: log a number computed from them, such as .mean()"
    )


def detached(value: Any) -> Any:
    """Tensors detached inside tuples, lists, dicts and dataclasses (a model's output class, such as
    transformers' ``ModelOutput``); other objects as they are, named tuples and mappings other than a dict
    among them. A callback reads them as values."""

    def as_value(item: Any) -> Any:
        return item.detach() if isinstance(item, torch.Tensor) else item

    def kept(item: Any) -> bool:
        a_dataclass = dataclasses.is_dataclass(item) and not isinstance(item, type)
        return not (a_dataclass or type(item) in (dict, list, tuple))

    return map_tensors(value, as_value, kept)


@dataclass
class Callbacks:
    """The run's callbacks by name, called in order."""

    by_name: Mapping[str, Any] = field(default_factory=dict)

    def call(self, hook: str, context: Context) -> None:
        for callback in self.by_name.values():
            method = getattr(callback, hook, None)
            if method is not None:
                method(context)

    def monitors(self) -> dict[str, str]:
        """The metric each callback that has a ``monitor`` reads, by its setting's key: the engine
        checks that validation gives it."""
        return {
            f"callbacks.{name}.monitor": callback.monitor
            for name, callback in self.by_name.items()
            if isinstance(getattr(callback, "monitor", None), str)
        }

    def has(self, hook: str) -> bool:
        return any(hasattr(callback, hook) for callback in self.by_name.values())

    def state_dict(self) -> dict[str, Any]:
        return {name: cb.state_dict() for name, cb in self.by_name.items() if hasattr(cb, "state_dict")}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Callbacks the checkpoint has no state for (added on resume) start fresh."""
        for name, callback in self.by_name.items():
            if name in state and hasattr(callback, "load_state_dict"):
                callback.load_state_dict(state[name])

    @contextmanager
    def evaluation_weights(self, model: nn.Module) -> Iterator[None]:
        with ExitStack() as stack:
            for callback in self.by_name.values():
                if hasattr(callback, "evaluation_weights"):
                    stack.enter_context(callback.evaluation_weights(model))
            yield

    def averaged_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        for callback in self.by_name.values():
            if hasattr(callback, "averaged_state_dict"):
                return callback.averaged_state_dict(model)
        return None


class EarlyStopping:
    """Ends the run when ``monitor`` has not improved by more than ``min_delta`` for ``patience``
    validations in a row."""

    def __init__(
        self, monitor: str = "val/loss", mode: str = "min", patience: int = 5, min_delta: float = 0.0
    ):
        if mode not in ("min", "max") or patience < 1 or min_delta < 0:
            raise ValueError(
                f"early stopping takes mode min or max, patience >= 1 and min_delta >= 0; got mode={mode}, "
                f"patience={patience}, min_delta={min_delta}"
            )
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, min_delta
        self.best: float | None = None
        self.best_step: int | None = None
        self.bad_validations = 0

    def on_validation_end(self, context: Context) -> None:
        if context.extra_validation:
            return
        value = context.metrics[self.monitor]
        if improves(value, self.best, self.mode, self.min_delta):
            self.best, self.best_step, self.bad_validations = value, context.step, 0
            return
        self.bad_validations += 1
        if self.bad_validations >= self.patience:
            best = f"{self.best:.4g} at step {self.best_step}" if self.best is not None else "none finite"
            context.request_stop(
                f"early stopping: {self.monitor} has not improved by more than {self.min_delta:g} for "
                f"{self.patience} validation(s) (best {best}, now {value:.4g})"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "bad_validations": self.bad_validations}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.best_step, self.bad_validations = (
            state["best"],
            state["best_step"],
            state["bad_validations"],
        )


def is_number(value: object) -> bool:
    """An int or a float, not a bool (``true`` is no rate) nor a string (``abc`` compares with nothing)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_number(value: object) -> bool:
    """A finite number > 0."""
    return is_number(value) and math.isfinite(value) and value > 0


class EMA:
    """An exponential moving average of the floating-point parameters and buffers, updated after every
    optimizer step: ``average = decay * average + (1 - decay) * weight``. Validation (so best.pt's
    choice) and ``eval`` use the averages; training continues on the model's own weights.

    ``warmup`` lowers the decay early on, as diffusers' ``EMAModel`` does: at the k-th update, with
    ``s = k - 1``, the decay is 0 for ``s = 0`` (the average starts at the weights), then
    ``min(decay, (1 + s) / (10 + s))``; with ``power`` set, ``min(decay, 1 - (1 + s / inv_gamma) **
    -power)`` (diffusers' ``use_ema_warmup=True``; 2/3 suits long runs, 3/4 short ones)."""

    def __init__(
        self, decay: float = 0.999, warmup: bool = False, inv_gamma: float = 1.0, power: float | None = None
    ):
        if not (is_number(decay) and 0.0 < decay < 1.0):
            raise ValueError(f"ema takes a decay in (0, 1); got decay={decay}")
        if not isinstance(warmup, bool):
            raise ValueError(f"ema takes warmup true or false; got warmup={warmup}")
        # inf would pass "> 0" and make the warmup's decay a constant (inv_gamma) or a step (power).
        if not positive_number(inv_gamma):
            raise ValueError(
                f"ema takes inv_gamma, a finite number > 0 (1.0 by default); got inv_gamma={inv_gamma}"
            )
        if power is not None and not positive_number(power):
            raise ValueError(f"ema takes power, a finite number > 0, or null; got power={power}")
        if not warmup and power is not None:
            raise ValueError(f"ema's power={power} shapes its warmup; set warmup=true, or leave power out")
        self.decay, self.warmup, self.inv_gamma, self.power = decay, warmup, inv_gamma, power
        self.averages: dict[str, torch.Tensor] = {}
        self.updates: int | None = 0  # diffusers' optimization_step: the warmup's count, saved with them

    def decay_at(self, update: int) -> float:
        """The decay of the ``update``-th update (1 for the first), as diffusers' ``get_decay``."""
        if not self.warmup:
            return self.decay
        step = update - 1
        if step <= 0:
            return 0.0
        if self.power is None:
            return min(self.decay, (1 + step) / (10 + step))
        return min(self.decay, 1 - (1 + step / self.inv_gamma) ** -self.power)

    def on_train_start(self, context: Context) -> None:
        if self.updates is None:
            self.updates = context.step
        restored = self.averages  # from a checkpoint (on the CPU), or empty
        self.averages = {
            name: restored[name].to(tensor.device) if name in restored else tensor.detach().clone()
            for name, tensor in self.tracked(context.model)
        }

    def on_step_end(self, context: Context) -> None:
        self.updates = (self.updates or 0) + 1
        weight = 1.0 - self.decay_at(self.updates)
        with torch.no_grad():
            for name, tensor in self.tracked(context.model):
                self.averages[name].lerp_(tensor, weight)

    @staticmethod
    def tracked(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in model.state_dict(keep_vars=True).items():
            if tensor.is_floating_point():
                yield name, tensor

    @contextmanager
    def evaluation_weights(self, model: nn.Module) -> Iterator[None]:
        own = {name: tensor.detach().clone() for name, tensor in self.tracked(model)}
        self.copy_into(model, self.averages)
        try:
            yield
        finally:
            self.copy_into(model, own)

    @staticmethod
    def copy_into(model: nn.Module, values: Mapping[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, tensor in EMA.tracked(model):
                tensor.copy_(values[name])

    def averaged_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return {**model.state_dict(), **copy.copy(self.averages)}

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "averages": self.averages, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A checkpoint from before the warmup has no count: the run's optimizer steps stand for it."""
        self.averages = {name: tensor.clone() for name, tensor in state["averages"].items()}
        self.updates = state.get("updates")
