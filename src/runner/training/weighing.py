"""How a window's micro-batches are weighed, so that their summed gradient is the gradient of the
window's mean loss over every process, as one big batch of the same items gives it:

- by the **items** each micro-batch's loss averages over, counted from the batches before the model
  runs (samples; tokens where the loss ignores padding): its mean loss times its share of the window's;
- by the **items a model says** (``num_items_in_batch``), known only after its forward: each
  micro-batch weighed against the first's count, the gradients rescaled once the window's is known;
- a loss that **sums** over its samples (``reduction.py``) goes backward as it is.

One micro-batch on one process needs no weight: its targets are not read (on a device, a read of them
would be a host sync per step). A step the model writes weighs by samples (:func:`sample_shares`)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from runner.training.batches import count_samples
from runner.training.device import host_number
from runner.training.distributed import sum_across_processes
from runner.training.reduction import sums_its_loss


class Weighed(Protocol):
    """What weighing reads of a learner (``step.Learner``)."""

    loss_fn: Callable
    plain_model: nn.Module | None
    target_key: str
    processes: int
    device: torch.device


@dataclass
class WindowWeights:
    """One window's weights, and its losses as they went backward (for the loss it logs)."""

    processes: int
    device: torch.device
    sums: bool  # a summed loss: each micro-batch's sum as it is, times the process count
    weighed: bool  # False: one micro-batch on one process, nothing counted
    samples: int
    # What each micro-batch's loss averages over, as the batches count it: numbers, or 0-d tensors on the
    # device where a data set yields device tensors (read at a log step, never on a quiet one).
    items: list[int | float | torch.Tensor]
    all_items: int | float | torch.Tensor  # over the window and every process
    shares: list[float | torch.Tensor]
    # How the first micro-batch's said items are summed over the processes, a collective between the
    # window's forwards: all_processes, or a step's own that first does what must precede it.
    sum_said: Callable[[float | torch.Tensor, int], float | torch.Tensor]
    said: list[int | float | torch.Tensor] = field(default_factory=list)  # the items a model says
    reference: float | torch.Tensor | None = None  # what every process weighs the items said against
    losses: list[torch.Tensor] = field(default_factory=list)
    weighted_losses: list[torch.Tensor] = field(default_factory=list)

    def weigh(self, index: int, loss: torch.Tensor, told: int | float | torch.Tensor | None) -> torch.Tensor:
        """The loss micro-batch ``index`` sends backward: its mean ``loss`` by its share of the items the
        window's loss averages over. ``told``: the items the model says it averaged over (or None).

        A share of 1 (one micro-batch, one process) is no multiply: bit-identical, cheaper. Counts a
        model says come after its forward: each micro-batch is weighed against the first ones' (of every
        process), and :meth:`rescale` finishes the gradients once the window's count is known."""
        said = self.said
        if self.weighed and (said or (index == 0 and told is not None)):
            said.append(self.items[index] if told is None else told)  # a number, or where it was made
            if index == 0:  # what every process weighs its micro-batches against: the same number,
                # any but 0 (a first micro-batch of padding alone says 0): the rescale cancels it.
                # Then a micro-batch's items as the batches count them, so that no weight is far
                # from 1 (under fp16 loss scaling a large one would overflow the gradients).
                typical = self.all_items / len(self.items)
                typical = typical.clamp(min=1) if isinstance(typical, torch.Tensor) else max(typical, 1)
                self.reference = or_else(self.sum_said(as_float(said[0]), self.processes), typical)
        share = self.shares[index]
        if said:
            alone = index == 0 and self.processes == 1
            weighted = loss if alone else loss * (as_float(said[-1]) / self.reference)
        elif isinstance(share, torch.Tensor):  # counted on the device
            weighted = loss * share.to(loss.dtype)
        else:
            weighted = loss * share if share != 1.0 else loss
        detached = loss.detach()
        self.losses.append(detached)
        self.weighted_losses.append(detached if weighted is loss else weighted.detach())
        return weighted

    def rescale(self) -> float | torch.Tensor | None:
        """What the unscaled gradients are multiplied by where a model said its items (None: nothing).
        They hold each micro-batch's gradient times its items over ``reference``, averaged over the
        processes; times the process count and ``reference`` over every process's items, they are the
        gradient of the mean over all those items. One collective with several processes; a tensor
        where a count was one (on the device: no read)."""
        if not self.said or (self.processes == 1 and len(self.said) == 1):
            return None
        total = all_processes(sum(as_float(count) for count in self.said), self.processes)
        total = total.clamp(min=1) if isinstance(total, torch.Tensor) else max(total, 1)
        return self.reference * self.processes / total

    def window_loss(self) -> tuple[torch.Tensor, float | torch.Tensor]:
        """This process's mean over its window's items, and their count (the log step averages it over
        every process's items). A micro-batch with no items (every target ignored) adds nothing: its own
        mean is 0/0, its gradient zero. A summed loss: per sample. Counts on the device are summed
        there (:func:`device_window_loss`)."""
        losses = self.losses
        if self.sums:
            return torch.stack(losses).sum() / self.samples, float(self.samples)
        counts = self.said if self.said else self.items
        if len(losses) == 1:
            return losses[0], as_float(counts[0])
        if any(isinstance(count, torch.Tensor) for count in counts):
            return device_window_loss(losses, counts)
        kept = [index for index, count in enumerate(counts) if count] or list(range(len(losses)))
        if not self.said and self.processes == 1:  # the shares are this window's: the mean is their sum
            window_loss = sum(self.weighted_losses[index] for index in kept)
        else:
            total = sum(counts[index] for index in kept) or 1
            window_loss = sum(losses[index].float() * (counts[index] / total) for index in kept)
        return window_loss, float(sum(counts[index] for index in kept))


def device_window_loss(
    losses: list[torch.Tensor], counts: list[int | float | torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`WindowWeights.window_loss` where a count is a tensor: the same mean, decided on the device
    (a micro-batch with no items selected away, not skipped by a read)."""
    like = next(count for count in counts if isinstance(count, torch.Tensor)).float()
    stacked = torch.stack([as_float(count) if isinstance(count, torch.Tensor)
                           else torch.full_like(like, count) for count in counts])  # fmt: skip
    kept = stacked != 0
    kept = kept | ~kept.any()  # none has items: every one (the loss is NaN, as one process logs it)
    items = (stacked * kept).sum()
    total = items.where(items != 0, 1.0)
    window_loss = sum(
        torch.where(kept[index], losses[index].float() * (stacked[index] / total), 0.0)
        for index in range(len(losses))
    )
    return window_loss, items


def as_float(count: int | float | torch.Tensor) -> float | torch.Tensor:
    return count.float() if isinstance(count, torch.Tensor) else float(count)


def or_else(value: float | torch.Tensor, fallback: float | torch.Tensor) -> float | torch.Tensor:
    """``value``, or ``fallback`` where it is 0: selected on the device where either is a tensor."""
    if isinstance(value, torch.Tensor):
        fallback = fallback.to(value.dtype) if isinstance(fallback, torch.Tensor) else fallback
        return value.where(value != 0, fallback)
    if isinstance(fallback, torch.Tensor):
        return fallback.new_full((), value) if value != 0 else fallback
    return value if value != 0 else fallback


def window_weights(
    learner: Weighed,
    window: list,
    count: Callable[..., int | float | torch.Tensor],
    sum_said: Callable[[float | torch.Tensor, int], float | torch.Tensor] | None = None,
) -> WindowWeights:
    """The weights of ``window``'s micro-batches, counted before any runs; ``count(batch, loss_fn,
    target_key)``: what a micro-batch's loss averages over (``batches.loss_items``); ``sum_said``: how
    items a model says are summed over the processes (:func:`all_processes` by default)."""
    processes = learner.processes
    sums = sums_its_loss(learner.loss_fn, learner.plain_model)
    weighed = not sums and (len(window) > 1 or processes > 1)
    items = [count(batch, learner.loss_fn, learner.target_key) for batch in window] if weighed else [1]
    all_items = all_processes(sum(items), processes)
    # A summed loss adds up: each micro-batch's sum as it is (times the process count, which averaging
    # the gradients divides out), its gradient the sum's over every process's window.
    shares = [float(processes)] * len(window) if sums else item_shares(items, all_items, processes)
    samples = sum(count_samples(batch, learner.target_key) for batch in window)
    return WindowWeights(
        processes, learner.device, sums, weighed, samples, items, all_items, shares, sum_said or all_processes
    )


def sample_shares(samples: list[int], processes: int) -> list[float]:
    """Each micro-batch's weight by its samples (a step the model writes); 1 for one micro-batch on one
    process."""
    if len(samples) == 1 and processes == 1:
        return [1.0]
    return item_shares(samples, all_processes(sum(samples), processes), processes)


def item_shares(
    items: list[int | float | torch.Tensor], all_items: int | float | torch.Tensor, processes: int
) -> list[float | torch.Tensor]:
    """Each micro-batch's weight: its items times the process count over every process's items (with
    one process, over the window's). Whole numbers divided once: the correctly rounded ratio, so
    counts proportional to the samples weigh exactly as samples do, and equal processes as one.
    Counts on the device (a data set that yields device tensors) are divided there, in float64."""
    if isinstance(all_items, torch.Tensor):
        total = all_items.to(wide_float(all_items.device))
        total = total.where(total != 0, 1.0)
        return [count * processes / total for count in items]
    return [count * processes / (all_items or 1) for count in items]


def wide_float(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64


def all_processes(count: int | float | torch.Tensor, processes: int) -> int | float | torch.Tensor:
    """The sum of ``count`` over every process (one small collective: on the CPU for a number, on the
    device for a tensor); itself with one."""
    if processes == 1:
        return count
    if isinstance(count, torch.Tensor):
        return summed(count, processes)
    dtype = torch.int64 if isinstance(count, int) else torch.float64
    return host_number(sum_across_processes(torch.tensor(count, dtype=dtype)))


def summed(value: torch.Tensor, processes: int) -> torch.Tensor:
    """``value`` summed over every process (a collective on its device); itself with one."""
    return value if processes == 1 else sum_across_processes(value.clone())
