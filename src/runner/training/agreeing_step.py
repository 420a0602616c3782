"""The step and the validation of several processes under DDP with ``on_oom=split``, and only there
(``experiment/parallel.py`` chooses it): every process learns that one ran out of memory at the same
point, so that all split alike (``oom.py``).

It is :func:`step.train_step` with three differences. The window's forwards and backwards are watched:
a process that runs out of memory tells the others at once, who learn it where they next ask
(``memory_agreement.py``). The gradients are averaged after the window, by runner, not by DDP inside
its last backward (whose bookkeeping a forward left unfinished on some processes would put out of
step), after one more agreement; and rank 0's buffers (BatchNorm's running statistics) are handed over
before the window's forwards and before a validation, where DDP's forward would hand them over (the
same values). A validation's forwards are watched alike, and all learn it before the pass's sums.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.training.batches import loss_items
from runner.training.distributed import average_gradients, broadcast_from_first
from runner.training.memory_agreement import Agreement
from runner.training.precision import Precision
from runner.training.step import Learner, Step, StepResult, backward_window, update_window
from runner.training.validation import validation_pass, validation_values
from runner.training.weighing import all_processes, window_weights


@dataclass(frozen=True)
class AgreeingStep:
    """What the agreeing step holds beyond ``train_step``'s learner: the agreement and the buffers."""

    agreement: Agreement
    buffers: list[torch.Tensor]  # the model's, handed over from rank 0

    def train(
        self,
        learner: Learner,
        window: list,
        clip_norm: float | None,
        check_finite: bool = True,
        keep_last: bool = False,
    ) -> StepResult:
        """``train_step``'s window, every process agreeing on out of memory before each collective."""
        agreement = self.agreement
        weights = window_weights(learner, window, loss_items, self.sum_said)
        broadcast_from_first(self.buffers)
        # The window's last agreement comes after its backward and after the copy the gradients are
        # averaged in (it may run out too): no collective runs inside a backward.
        with agreement.watch():
            last = backward_window(learner, window, weights, keep_last)
            average_gradients(learner.trainable, learner.processes, before_reducing=agreement.agree)
        return update_window(learner, weights, clip_norm, check_finite, last)

    def sum_said(self, count: float | torch.Tensor, processes: int) -> float | torch.Tensor:
        """The items a model says, summed over the processes after the window's first forward: agreed
        before, as every collective of the step."""
        self.agreement.agree()
        return all_processes(count, processes)

    def evaluate(
        self,
        model: nn.Module,
        loader: Iterable,
        loss_fn: Callable,
        device: torch.device,
        precision: Precision,
        channels_last: bool,
        metrics: Mapping[str, Any],
        target_key: str,
    ) -> dict[str, float]:
        """``validation.evaluate``: a process that runs out of memory leaves its pass, the others finish
        theirs (their counts may differ), and all learn it before the sums."""
        broadcast_from_first(self.buffers)
        with self.agreement.evaluation():
            passed = validation_pass(
                model, loader, loss_fn, device, precision, channels_last, metrics, target_key
            )
        return validation_values(passed, metrics)


def agreeing_step(agreement: Agreement, model: nn.Module) -> Step:
    """The step that ``agreement`` (enabled) asks for, over ``model``'s buffers."""
    agreeing = AgreeingStep(agreement, list(model.buffers()))
    return Step(agreeing.train, evaluate=agreeing.evaluate, agreement=agreement)
