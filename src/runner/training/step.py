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

from runner.training.batches import count_samples, forward, items_in_outputs, loss_items, to_device
from runner.training.distributed import average_gradients, sum_across_processes
from runner.training.memory_agreement import Agreement
from runner.training.phases import phase
from runner.training.precision import Precision
from runner.training.reduction import sums_its_loss


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
    # With several processes under DDP and on_oom=split: where each says whether it ran out of memory
    # (memory_agreement.py); enabled, the gradients are averaged after the window's backward, not inside
    # it, and rank 0's buffers (BatchNorm's running statistics) handed over before a window's forwards.
    memory: Agreement = field(default_factory=Agreement)
    share_buffers: Callable[[], None] = lambda: None
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

    @property
    def writes_own_step(self) -> bool:
        """The model's ``training_step`` runs the window (``manual_step.py``), not ``train_step``'s."""
        return getattr(self.optimizer, "train_window", None) is not None


@dataclass
class StepResult:
    """Tensors stay on the device: reading them is a host sync, left to the log steps."""

    loss: torch.Tensor  # the window's mean loss
    grad_norm_before_clip: torch.Tensor
    lr: float  # the rate this update used (group 0)
    applied: bool  # False: a non-finite gradient, the update was skipped
    samples: int  # in the window
    group_lrs: tuple[float, ...] = ()  # every parameter group's rate, when there are several
    items: float = 1.0  # what ``loss`` averages over (tokens, samples): with several processes, its weight
    # With keep_last: the window's last micro-batch (on the device) and what the model returned for it.
    last_batch: Any = None
    last_outputs: Any = None
    scalars: dict[str, Any] = field(default_factory=dict)  # more to log (a step the model writes)


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
    if (own_step := getattr(learner.optimizer, "train_window", None)) is not None:  # manual_step.py
        return own_step(learner, window, clip_norm, check_finite, keep_last)
    model, precision, optimizer = learner.model, learner.precision, learner.optimizer
    samples = sum(count_samples(batch, learner.target_key) for batch in window)
    # A summed loss (reduction.py) adds up: each micro-batch's sum as it is (times the process count,
    # which averaging the gradients divides out), its gradient the sum's over every process's window.
    sums = sums_its_loss(learner.loss_fn, learner.plain_model)
    # One micro-batch on one process needs no weight: its targets are not read (on a device, a read of
    # them would be a host sync per step).
    weighed = not sums and (len(window) > 1 or learner.processes > 1)
    items = [loss_items(batch, learner.loss_fn, learner.target_key) for batch in window] if weighed else [1]
    all_items = all_processes(sum(items), learner.processes)
    shares = (
        [float(learner.processes)] * len(window) if sums else item_shares(items, all_items, learner.processes)
    )
    said: list[torch.Tensor] = []  # the items a model with its own loss says it averaged over
    losses, weighted_losses = [], []
    learner.share_buffers()
    for index, batch in enumerate(window):
        last_micro_batch = index == len(window) - 1
        # With several processes, one that runs out of memory tells the others (memory_agreement.py).
        syncs = nullcontext() if last_micro_batch else learner.skip_grad_sync()
        with learner.memory.micro_batch(), syncs:
            batch = to_device(batch, learner.device, learner.channels_last)
            with precision.autocast(), phase("forward"):  # a named range while profiling (phases.py)
                result = forward(model, batch, learner.loss_fn, learner.target_key)
            loss, told = result.loss, items_in_outputs(result.outputs)
            # Outputs (an LM's logits) kept past the micro-batch only when asked: they cost memory.
            outputs = result.outputs if keep_last else None
            del result
            if weighed and (said or (index == 0 and told is not None)):
                said.append(torch.as_tensor(items[index] if told is None else told, device=learner.device))
                if index == 0:  # what every process weighs its micro-batches against: the same number,
                    # any but 0 (a first micro-batch of padding alone says 0): the rescale cancels it.
                    # Then a micro-batch's items as the batches count them, so that no weight is far
                    # from 1 (under fp16 loss scaling a large one would overflow the gradients).
                    learner.memory.agree()  # before a collective (memory_agreement.py)
                    reference = summed(said[0].float(), learner.processes)
                    typical = max(all_items / len(window), 1)
                    reference = reference.where(reference != 0, typical)
            # Weight each micro-batch's mean loss by its share of the items the window's loss averages
            # over (samples; tokens where the loss ignores padding): the summed gradient is then the
            # gradient of the mean loss over the whole window and every process (whose gradients are
            # averaged), also for a short last window. A share of 1 (one micro-batch, one process) is
            # no multiply: bit-identical, cheaper. Counts a model says come after its forward: each
            # micro-batch is weighed against the first ones' (of every process), and the gradients
            # rescaled once the window's count is known.
            if said:
                alone = index == 0 and learner.processes == 1
                weighted_loss = loss if alone else loss * (said[-1].float() / reference)
            else:
                weighted_loss = loss * shares[index] if shares[index] != 1.0 else loss
            with phase("backward"):
                precision.scaler.scale(weighted_loss).backward()
        losses.append(loss.detach())
        weighted_losses.append(weighted_loss.detach())
    # The window's last agreement (memory_agreement.py), after its backward and after the copy the
    # gradients are averaged in (it may run out too); with it, no collective ran inside a backward.
    with learner.memory.micro_batch():
        if learner.memory.enabled:
            average_gradients(learner.trainable, learner.processes, before_reducing=learner.memory.agree)

    precision.scaler.unscale_(optimizer)
    if said:
        rescale_to_items_said(learner, torch.stack(said).float(), reference)
    # Clip only after backward, and under loss scaling only after unscaling.
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
        with phase("optimizer"):
            precision.scaler.step(optimizer)  # under loss scaling it sees an overflow and skips the step
        precision.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    # This process's mean over its window's items (the log step averages it over every process's items).
    # A micro-batch with no items (every target ignored) adds nothing: its own mean is 0/0, its gradient
    # zero.
    counts = [float(count) for count in said] if said else items
    kept = [index for index, count in enumerate(counts) if count] or list(range(len(window)))
    if len(window) == 1:
        window_loss = losses[0]
    elif not said and learner.processes == 1:  # the shares are this window's: the mean is their sum
        window_loss = sum(weighted_losses[index] for index in kept)
    else:
        total = sum(counts[index] for index in kept) or 1
        window_loss = sum(losses[index].float() * (counts[index] / total) for index in kept)
    window_items = float(sum(counts[index] for index in kept))
    if sums:  # per sample: the window's sum over its samples
        window_loss, window_items = torch.stack(losses).sum() / samples, float(samples)
    last = (batch, outputs) if keep_last else (None, None)
    return StepResult(
        window_loss, grad_norm_before_clip, lr, applied, samples, group_lrs, window_items, *last
    )


def item_shares(items: list[int | float], all_items: int | float, processes: int) -> list[float]:
    """Each micro-batch's weight: its items times the process count over every process's items (with
    one process, over the window's). Whole numbers divided once: the correctly rounded ratio, so
    counts proportional to the samples weigh exactly as samples do, and equal processes as one."""
    return [count * processes / (all_items or 1) for count in items]


def all_processes(count: int | float, processes: int) -> int | float:
    """The sum of ``count`` over every process (one small collective on the CPU); itself with one."""
    if processes == 1:
        return count
    dtype = torch.int64 if isinstance(count, int) else torch.float64
    return sum_across_processes(torch.tensor(count, dtype=dtype)).item()


def summed(value: torch.Tensor, processes: int) -> torch.Tensor:
    """``value`` summed over every process (a collective on its device); itself with one."""
    return value if processes == 1 else sum_across_processes(value.clone())


def rescale_to_items_said(learner: Learner, said: torch.Tensor, reference: torch.Tensor) -> None:
    """The gradients hold each micro-batch's gradient times its items over ``reference``, averaged over
    the processes; times the process count and ``reference`` over every process's items, they are the
    gradient of the mean over all those items. Nothing to do for one micro-batch on one process."""
    if learner.processes == 1 and len(said) == 1:
        return
    total = summed(said.sum(), learner.processes)
    factor = float(reference * learner.processes / total.clamp(min=1))  # a number: sharded gradients take it
    for parameter in learner.trainable:
        if parameter.grad is not None:
            parameter.grad.mul_(factor)


def mean_over_processes(result: StepResult, processes: int) -> torch.Tensor:
    """The window's loss over every process's items (one collective, at log steps only): the loss of
    the whole window, as one process of all the batches logs it. Each process's own mean is weighted
    by its items; one with none (all padding) adds nothing."""
    if processes == 1:
        return result.loss
    loss = result.loss.detach().float()
    weighted = loss * result.items if result.items else torch.zeros_like(loss)
    totals = sum_across_processes(torch.stack([weighted, torch.full_like(loss, result.items)]))
    return totals[0] / totals[1]  # no items anywhere: NaN, as one process logs it
