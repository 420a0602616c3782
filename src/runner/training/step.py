"""One training step: an accumulation window of micro-batches becomes one optimizer update.
Batches may be of any structure (see ``batches.py``).

The one place runner does forward, backward, loss scaling, clipping and the update: ``fit``, doctor's
overfit check and ``lr_find`` all call :func:`train_step`, so they train alike.
"""

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from runner.training.batches import count_samples, forward, to_device
from runner.training.precision import Precision


@dataclass
class Learner:
    """What a step updates, and how."""

    model: nn.Module  # what the step calls (DDP or compiled wrappers included)
    loss_fn: Callable  # or ModelLoss (loss=from_model)
    optimizer: torch.optim.Optimizer
    precision: Precision
    device: torch.device
    channels_last: bool  # image batches in channels-last memory format
    target_key: str  # where a mapping batch holds its targets
    # With several processes: DDP's no_sync (FSDP's no_gradient_sync), so gradients are reduced only on
    # a window's last micro-batch.
    skip_grad_sync: Callable[[], AbstractContextManager] = nullcontext
    plain_model: nn.Module | None = None  # the module inside any wrapper (callbacks see it); default: model
    trainable: list[torch.Tensor] = field(init=False)

    def __post_init__(self) -> None:
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        if self.plain_model is None:
            self.plain_model = self.model


@dataclass
class StepResult:
    """Tensors stay on the device: reading them is a host sync, left to the log steps."""

    loss: torch.Tensor  # the window's mean loss
    grad_norm_before_clip: torch.Tensor
    lr: float  # the rate this update used (group 0)
    applied: bool  # False: a non-finite gradient, the update was skipped
    samples: int  # in the window
    group_lrs: tuple[float, ...] = ()  # every parameter group's rate, when there are several
    # With keep_last: the window's last micro-batch (on the device) and what the model returned for it.
    last_batch: Any = None
    last_outputs: Any = None


def accumulation_windows(batches: Iterable, micro_batches_per_step: int) -> Iterator[list]:
    """Group micro-batches into the windows that make one optimizer step each."""
    iterator = iter(batches)
    while window := list(itertools.islice(iterator, micro_batches_per_step)):
        yield window


def clipped_norm(grad_norm: float, max_norm: float | None) -> float:
    """The total norm after ``clip_grads_with_norm_``: it scales every gradient by this same
    coefficient, so the norm follows from the norm before, without another pass over the gradients."""
    if max_norm is None:
        return grad_norm
    return grad_norm * min(max_norm / (grad_norm + 1e-6), 1.0)


def global_norm(norm: torch.Tensor) -> torch.Tensor:
    """A norm over sharded gradients is a DTensor (known by its ``full_tensor``, so that runs without
    sharding need not import it): its full value is the global norm, a collective."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def train_step(
    learner: Learner,
    window: list,
    clip_norm: float | None,
    check_finite: bool = True,
    keep_last: bool = False,
) -> StepResult:
    """Forward and backward over the window's micro-batches, then unscale, clip and update. With
    ``check_finite`` a non-finite gradient norm leaves the weights and optimizer as they are (one read
    of the norm per step). Gradients are cleared after the update. ``keep_last`` returns the last
    micro-batch and its outputs (for callbacks); off, nothing holds them past the step."""
    model, precision, optimizer = learner.model, learner.precision, learner.optimizer
    samples = [count_samples(batch, learner.target_key) for batch in window]
    window_samples = sum(samples)
    weighted_losses = []
    for index, batch in enumerate(window):
        batch = to_device(batch, learner.device, learner.channels_last)
        last_micro_batch = index == len(window) - 1
        with nullcontext() if last_micro_batch else learner.skip_grad_sync():
            with precision.autocast():
                result = forward(model, batch, learner.loss_fn, learner.target_key)
            # Outputs (an LM's logits) kept past the micro-batch only when asked: they cost memory.
            loss, outputs = result.loss, result.outputs if keep_last else None
            del result
            # Weight each micro-batch's mean loss by its share of the window's samples: the summed
            # gradient is then the gradient of the mean loss over the whole window, also for a short
            # last window (dividing by the window count would not be). A window of one micro-batch
            # has share 1: no multiply (bit-identical, cheaper).
            share = samples[index] / window_samples
            weighted_loss = loss * share if share != 1.0 else loss
            precision.scaler.scale(weighted_loss).backward()
        weighted_losses.append(weighted_loss.detach())

    # Clip only after backward, and under loss scaling only after unscaling.
    precision.scaler.unscale_(optimizer)
    grads = [p.grad for p in learner.trainable if p.grad is not None]
    # Over sharded gradients (strategy=fsdp) the global norm, the same on every process: clipping, the
    # logged norm and the non-finite guard then decide alike everywhere.
    grad_norm_before_clip = global_norm(torch.nn.utils.get_total_norm(grads))
    if clip_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(learner.trainable, clip_norm, grad_norm_before_clip)
    groups = optimizer.param_groups
    lr = groups[0]["lr"]
    group_lrs = tuple(group["lr"] for group in groups) if len(groups) > 1 else ()
    # The guard reads one number per step (the norm above): on a GPU one small device-to-host copy,
    # as loss scaling does too.
    applied = not check_finite or bool(torch.isfinite(grad_norm_before_clip))
    if applied or precision.scaler.is_enabled():
        precision.scaler.step(optimizer)  # under loss scaling it sees an overflow and skips the step
        precision.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    # The window's mean loss (one micro-batch: its loss as it is, no extra op).
    window_loss = weighted_losses[0] if len(weighted_losses) == 1 else sum(weighted_losses)
    last = (batch, outputs) if keep_last else (None, None)
    return StepResult(window_loss, grad_norm_before_clip, lr, applied, window_samples, group_lrs, *last)
