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
from runner.training.distributed import sum_across_processes
from runner.training.memory_agreement import Agreement
from runner.training.reduction import sums_its_loss


class Weighed(Protocol):
    """What weighing reads of a learner (``step.Learner``)."""

    loss_fn: Callable
    plain_model: nn.Module | None
    target_key: str
    processes: int
    device: torch.device
    memory: Agreement


@dataclass
class WindowWeights:
    """One window's weights, and its losses as they went backward (for the loss it logs)."""

    processes: int
    device: torch.device
    sums: bool  # a summed loss: each micro-batch's sum as it is, times the process count
    weighed: bool  # False: one micro-batch on one process, nothing counted
    samples: int
    items: list[int | float]  # what each micro-batch's loss averages over, as the batches count it
    all_items: int | float  # over the window and every process
    shares: list[float]
    agree: Callable[[], None]  # before the window's first collective (memory_agreement.py)
    said: list[torch.Tensor] = field(default_factory=list)  # the items a model with its own loss says
    reference: torch.Tensor | None = None  # what every process weighs the items said against
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
            said.append(torch.as_tensor(self.items[index] if told is None else told, device=self.device))
            if index == 0:  # what every process weighs its micro-batches against: the same number,
                # any but 0 (a first micro-batch of padding alone says 0): the rescale cancels it.
                # Then a micro-batch's items as the batches count them, so that no weight is far
                # from 1 (under fp16 loss scaling a large one would overflow the gradients).
                self.agree()
                reference = summed(said[0].float(), self.processes)
                typical = max(self.all_items / len(self.items), 1)
                self.reference = reference.where(reference != 0, typical)
        if said:
            alone = index == 0 and self.processes == 1
            weighted = loss if alone else loss * (said[-1].float() / self.reference)
        else:
            weighted = loss * self.shares[index] if self.shares[index] != 1.0 else loss
        detached = loss.detach()
        self.losses.append(detached)
        self.weighted_losses.append(detached if weighted is loss else weighted.detach())
        return weighted

    def rescale(self) -> float | None:
        """What the unscaled gradients are multiplied by where a model said its items (None: nothing).
        They hold each micro-batch's gradient times its items over ``reference``, averaged over the
        processes; times the process count and ``reference`` over every process's items, they are the
        gradient of the mean over all those items. One collective with several processes."""
        if not self.said or (self.processes == 1 and len(self.said) == 1):
            return None
        total = summed(torch.stack(self.said).float().sum(), self.processes)
        return float(self.reference * self.processes / total.clamp(min=1))  # sharded gradients take a number

    def window_loss(self) -> tuple[torch.Tensor, float]:
        """This process's mean over its window's items, and their count (the log step averages it over
        every process's items). A micro-batch with no items (every target ignored) adds nothing: its own
        mean is 0/0, its gradient zero. A summed loss: per sample."""
        losses = self.losses
        if self.sums:
            return torch.stack(losses).sum() / self.samples, float(self.samples)
        counts = [float(count) for count in self.said] if self.said else self.items
        kept = [index for index, count in enumerate(counts) if count] or list(range(len(losses)))
        if len(losses) == 1:
            window_loss = losses[0]
        elif not self.said and self.processes == 1:  # the shares are this window's: the mean is their sum
            window_loss = sum(self.weighted_losses[index] for index in kept)
        else:
            total = sum(counts[index] for index in kept) or 1
            window_loss = sum(losses[index].float() * (counts[index] / total) for index in kept)
        return window_loss, float(sum(counts[index] for index in kept))


def window_weights(learner: Weighed, window: list, count: Callable[..., int | float]) -> WindowWeights:
    """The weights of ``window``'s micro-batches, counted before any runs; ``count(batch, loss_fn,
    target_key)``: what a micro-batch's loss averages over (``batches.loss_items``)."""
    processes = learner.processes
    sums = sums_its_loss(learner.loss_fn, learner.plain_model)
    weighed = not sums and (len(window) > 1 or processes > 1)
    items = [count(batch, learner.loss_fn, learner.target_key) for batch in window] if weighed else [1]
    all_items = all_processes(sum(items), processes)
    # A summed loss adds up: each micro-batch's sum as it is (times the process count, which averaging
    # the gradients divides out), its gradient the sum's over every process's window.
    shares = [float(processes)] * len(window) if sums else item_shares(items, all_items, processes)
    samples = sum(count_samples(batch, learner.target_key) for batch in window)
    agree = learner.memory.agree
    return WindowWeights(processes, learner.device, sums, weighed, samples, items, all_items, shares, agree)


def sample_shares(samples: list[int], processes: int) -> list[float]:
    """Each micro-batch's weight by its samples (a step the model writes); 1 for one micro-batch on one
    process."""
    if len(samples) == 1 and processes == 1:
        return [1.0]
    return item_shares(samples, all_processes(sum(samples), processes), processes)


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
