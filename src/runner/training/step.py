"""One training step: an accumulation window of micro-batches becomes one optimizer update.
Batches may be of any structure (see ``batches.py``).

The one place runner does forward and backward: :func:`train_step`. Which step a learner trains with
(a :class:`Step`) is chosen once, where its optimizers are built (``experiment/optimizers.py``'s
``chosen_step``): this one, a step the model writes (``manual_step.py``), or this one agreeing on out of
memory with several processes (``agreeing_step.py``); ``fit``, doctor's checks, ``lr_find`` and
``oom.py`` call the learner's, so they train alike. How the micro-batches are weighed is
``weighing.py``; the update that ends the window (unscale, clip, guard, step) is ``update.py``, shared
with a step the model writes.
"""

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from runner.training.batches import forward, items_in_outputs, loss_items, to_device
from runner.training.distributed import sum_across_processes
from runner.training.memory_agreement import Agreement
from runner.training.phases import phase
from runner.training.precision import Precision
from runner.training.update import update
from runner.training.validation import evaluate
from runner.training.weighing import WindowWeights, window_weights


@dataclass(frozen=True)
class Step:
    """How a learner trains a window, chosen once where its optimizers are built
    (``experiment/optimizers.py``: ``chosen_step``), with what the loop must know about it."""

    # (learner, window, clip_norm, check_finite, keep_last) -> StepResult
    train: Callable[..., "StepResult"]
    # The model's own training_step (manual_step.py): the guard decides on the device (engine.py), and
    # out of memory is not redone (oom.py): an update may have applied.
    writes_own: bool = False
    evaluate: Callable[..., dict[str, float]] = evaluate  # the validation that goes with it
    # Where several processes agree that one ran out of memory (agreeing_step.py); off, none does.
    agreement: Agreement = field(default_factory=Agreement)


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
    processes: int = 1  # that average their gradients (DDP, FSDP): the window's items are summed over them
    step: Step = field(default_factory=lambda: RUNNERS_STEP)  # what trains a window: train_step by default
    trainable: list[torch.Tensor] = field(init=False)
    # The buffers a window changes (oom.py copies them before each): None until a first window showed it.
    changing_buffers: list[torch.Tensor] | None = field(init=False, default=None)
    # Whether a window draws from Python's or numpy's generator (oom.py keeps them only then): None until
    # a first window showed it.
    draws_host_random: bool | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        if self.plain_model is None:
            self.plain_model = self.model


@dataclass(frozen=True)
class ReturnedLosses:
    """The window's losses a model's own step returned, by name, on the device until the guard reads."""

    names: tuple[str, ...]
    values: torch.Tensor  # one float per name


@dataclass
class StepResult:
    """Tensors stay on the device: reading them is a host sync, left to the log steps."""

    loss: torch.Tensor  # the window's mean loss
    grad_norm_before_clip: torch.Tensor
    lr: float  # the rate this update used (group 0)
    # False: a non-finite gradient, the update was skipped; a 0-d tensor where the device decided it
    # (on_nonfinite=skip, loss scaling: update.py), read only by whoever asks.
    applied: bool | torch.Tensor
    samples: int  # in the window
    group_lrs: tuple[float, ...] = ()  # every parameter group's rate, when there are several
    # What ``loss`` averages over (tokens, samples): with several processes, its weight. A tensor where it
    # was counted on the device (read with the log step's values).
    items: float | torch.Tensor = 1.0
    # With keep_last: the window's last micro-batch (on the device) and what the model returned for it.
    last_batch: Any = None
    last_outputs: Any = None
    scalars: dict[str, Any] = field(default_factory=dict)  # more to log (a step the model writes)
    # A step the model writes, checked for non-finite values: the losses it returned (the guard reads them).
    returned_losses: "ReturnedLosses | None" = None


def accumulation_windows(batches: Iterable, micro_batches_per_step: int) -> Iterator[list]:
    """Group micro-batches into the windows that make one optimizer step each."""
    iterator = iter(batches)
    while window := list(itertools.islice(iterator, micro_batches_per_step)):
        yield window


def train_step(
    learner: Learner,
    window: list,
    clip_norm: float | None,
    check_finite: bool = True,
    keep_last: bool = False,
) -> StepResult:
    """A hand-written loop's inner loop: forward and backward over the window's micro-batches, each
    loss weighed by its share of the window (``weighing.py``), then one update (``update.py``). With
    ``check_finite`` a non-finite gradient norm leaves the weights and optimizer as they are, decided on
    the device (``update.py``: no read). ``keep_last`` returns the last micro-batch and its outputs (for
    callbacks); off, nothing holds them past the step."""
    weights = window_weights(learner, window, loss_items)
    last = backward_window(learner, window, weights, keep_last)
    return update_window(learner, weights, clip_norm, check_finite, last)


def backward_window(learner: Learner, window: list, weights: WindowWeights, keep_last: bool) -> tuple:
    """Forward and backward over the window's micro-batches, their gradients summed; returns the last
    micro-batch and its outputs where ``keep_last`` asks (else Nones)."""
    model, precision = learner.model, learner.precision
    last = len(window) - 1
    for index, batch in enumerate(window):
        # Gradients reduced on the window's last micro-batch only.
        with nullcontext() if index == last else learner.skip_grad_sync():
            batch = to_device(batch, learner.device, learner.channels_last)
            with precision.autocast(), phase("forward"):  # a named range while profiling (phases.py)
                result = forward(model, batch, learner.loss_fn, learner.target_key)
            loss = weights.weigh(index, result.loss, items_in_outputs(result.outputs))
            # Outputs (an LM's logits) kept past the micro-batch only when asked: they cost memory.
            outputs = result.outputs if keep_last else None
            del result
            with phase("backward"):
                precision.scaler.scale(loss).backward()
    return (batch, outputs) if keep_last else (None, None)


def update_window(
    learner: Learner, weights: WindowWeights, clip_norm: float | None, check_finite: bool, last: tuple
) -> StepResult:
    """The update that ends the window (``update.py``), and what the step reports of it."""
    precision, optimizer = learner.precision, learner.optimizer
    done = update(optimizer, learner.trainable, precision.scaler, clip_norm, check_finite, weights.rescale())
    precision.scaler.update()
    window_loss, items = weights.window_loss()
    groups = optimizer.param_groups
    group_lrs = tuple(group["lr"] for group in groups) if len(groups) > 1 else ()
    return StepResult(
        window_loss, done.norm, groups[0]["lr"], done.applied, weights.samples, group_lrs, items, *last
    )


RUNNERS_STEP = Step(train_step)


def mean_over_processes(result: StepResult, processes: int) -> torch.Tensor:
    """The window's loss over every process's items (one collective, at log steps only): the loss of
    the whole window, as one process of all the batches logs it. Each process's own mean is weighted
    by its items; one with none (all padding) adds nothing."""
    if processes == 1:
        return result.loss
    loss, items = result.loss.detach().float(), result.items
    if isinstance(items, torch.Tensor):  # counted on the device: selected there
        weighted, items = (loss * items).where(items != 0, 0.0), items.to(loss.dtype).reshape(())
    else:
        weighted, items = loss * items if items else torch.zeros_like(loss), torch.full_like(loss, items)
    totals = sum_across_processes(torch.stack([weighted, items]))
    return totals[0] / totals[1]  # no items anywhere: NaN, as one process logs it
