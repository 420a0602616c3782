"""Validation metrics. A metric is any object with torchmetrics' protocol, ``update(preds, target)``,
``compute()`` and ``reset()``; torchmetrics' own work as they are. ``preds`` are the model's logits
(``outputs.logits``, ``outputs["logits"]`` or the output), ``target`` the batch's targets. Logged as
``val/<name>``. A metric that defines ``from_validation_loss(loss)`` instead is computed from the
validation loss (perplexity)."""

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch
from torch import nn

from runner.config.errors import ConfigError
from runner.training.distributed import sum_across_processes


class Metric(Protocol):
    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None: ...
    def compute(self) -> Any: ...
    def reset(self) -> None: ...


def predicted_classes(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
    """The argmax over the class dimension of class scores for integer targets: dimension 1 for
    torch's ``(N, C, ...)`` layout, the last for ``(N, ..., C)`` (transformers' logits). ``None``
    when ``preds`` are not class scores for ``target``."""
    if target.is_floating_point() or preds.ndim != target.ndim + 1 or preds.shape[0] != target.shape[0]:
        return None
    if preds.shape[2:] == target.shape[1:]:
        return preds.argmax(dim=1)
    if preds.shape[:-1] == target.shape:
        return preds.argmax(dim=-1)
    return None


class Accuracy:
    """The share of class predictions equal to their targets (targets equal to ``ignore_index`` are
    not counted), summed over every process. Batches that are not class scores against integer
    targets (a regression) are not counted; with none, the metric is not logged. ``shift=True`` is
    next-token accuracy for a causal language model whose labels are its inputs (transformers'
    convention): position t's scores against label t+1, as the model's own loss shifts them."""

    def __init__(self, ignore_index: int = -100, shift: bool = False) -> None:
        self.ignore_index = ignore_index
        self.shift = shift
        self.reset()

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        if self.shift:
            preds, target = preds[:, :-1], target[:, 1:]
        predicted = predicted_classes(preds, target)
        if predicted is None:
            return
        counted = target != self.ignore_index
        self.correct = self.correct + ((predicted == target) & counted).sum()
        self.total = self.total + counted.sum()
        self.counted_any = True

    def compute(self) -> torch.Tensor | None:
        """On the device (read with the other metrics in one go); ``None`` when nothing was counted."""
        if not self.counted_any:  # the same on every process: they all run the same model and data
            return None
        correct, total = sum_across_processes(self.correct), sum_across_processes(self.total)
        return correct.double() / total.clamp(min=1)

    def reset(self) -> None:
        self.correct: torch.Tensor | int = 0
        self.total: torch.Tensor | int = 0
        self.counted_any = False


class Perplexity:
    """``exp`` of the validation loss: with class-index targets the loss is the mean over tokens,
    so this is the per-token perplexity."""

    def from_validation_loss(self, loss: float) -> float:
        return math.exp(min(loss, 700.0))  # past e^700 a float overflows: report it as huge, not an error


def uses_loss(metric: Any) -> bool:
    return hasattr(metric, "from_validation_loss")


# Losses that are not a negative log-likelihood over classes: exp of them is no perplexity.
REGRESSION_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss)


def check_metrics_fit_loss(metrics: Mapping[str, Any], loss_fn: Callable) -> None:
    """A metric computed from the validation loss (perplexity) needs a cross-entropy loss: with a
    regression loss it would log a number that means nothing. Checked before the run writes."""
    if not isinstance(loss_fn, REGRESSION_LOSSES):
        return
    for name, metric in metrics.items():
        if uses_loss(metric):
            raise ConfigError(
                f"metrics.{name}: {type(metric).__name__} is exp of the validation loss, a perplexity only "
                f"for a cross-entropy loss, but loss is {type(loss_fn).__name__} (a regression loss); "
                f"remove {name} from metrics (metrics=none)"
            )


def unshifted_accuracy_warning(
    metrics: Mapping[str, Any], loss_fn: Callable, batch: Any, target_key: str
) -> str | None:
    """A causal language model in transformers' convention (its labels are its ``input_ids``; its own
    loss shifts them, position t predicting label t + 1) validated with an unshifted accuracy, which
    scores position t against label t: a number that means nothing. Read from the first batch."""
    from runner.training.batches import ModelLoss, as_mapping

    names = [name for name, metric in metrics.items() if isinstance(metric, Accuracy) and not metric.shift]
    mapping = as_mapping(batch)
    if not names or not isinstance(loss_fn, ModelLoss) or mapping is None:
        return None
    labels, inputs = mapping.get(target_key), mapping.get("input_ids")
    if (
        not (isinstance(labels, torch.Tensor) and isinstance(inputs, torch.Tensor))
        or labels.shape != inputs.shape
    ):
        return None
    kept = labels != ModelLoss.ignore_index
    if not kept.any() or not torch.equal(labels[kept], inputs[kept]):
        return None
    name = names[0]
    return (
        f"metrics.{name}: the batches' {target_key} are their input_ids (a causal language model's, whose "
        f"loss scores position t against label t + 1), but val/{name} scores position t against label t; "
        f"set metrics.{name}.shift=true for next-token accuracy"
    )


def unlogged_metrics_warning(metrics: Mapping[str, Any], values: Mapping[str, float]) -> str | None:
    """What to say when a validation gives no value for metrics the run plan lists; None when it
    gives them all."""
    missing = [f"val/{name}" for name in metrics if f"val/{name}" not in values]
    if not missing:
        return None
    names = ", ".join(missing)
    return (
        f"{names}: listed in the run plan (metrics), but the first validation gave no value, so "
        f"{'they are' if len(missing) > 1 else 'it is'} not logged: a metric counts the model's class "
        "scores (logits) against integer targets, and this run's outputs or targets are not those; "
        "remove it from metrics"
    )
