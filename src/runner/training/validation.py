"""Validation: the mean loss and every metric, under ``eval()`` and no_grad, over every process's
shard. The loss is the mean over what the loss averages over (tokens, for sequences), not over
batches or samples. The sums stay on the device until the pass's end, read there once."""

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.training.batches import (
    ModelLoss,
    count_samples,
    forward,
    items_in_outputs,
    logits_of,
    loss_elements,
    scored_targets,
    to_device,
)
from runner.training.device import to_floats
from runner.training.distributed import sum_across_processes
from runner.training.item_counts import check_counted
from runner.training.metrics import uses_loss
from runner.training.modes import evaluation_mode
from runner.training.precision import Precision
from runner.training.random_state import kept_random_state
from runner.training.reduction import sums_its_loss

ELEMENTS = "the items the loss averaged over"  # read with the values, never logged


def improves(value: float, best: float | None, mode: str, min_delta: float = 0.0) -> bool:
    """NaN never counts as best; an improvement must be larger than ``min_delta``."""
    if not math.isfinite(value):
        return False
    return best is None or (value < best - min_delta if mode == "min" else value > best + min_delta)


@dataclass
class PassSums:
    """A validation pass's sums on this process, on the device: what :func:`validation_values` reads."""

    loss_sum: torch.Tensor
    elements: torch.Tensor  # the items the loss averaged over
    said: bool  # the model said its counts
    batch_metrics: dict[str, Any]  # the metrics updated batch by batch


def evaluate(
    model: nn.Module,
    loader: Iterable,
    loss_fn: Callable,
    device: torch.device,
    precision: Precision,
    channels_last: bool,
    metrics: Mapping[str, Any],
    target_key: str,
) -> dict[str, float]:
    """``val/loss`` and ``val/<name>`` for each metric that gave a value (accuracy gives none when the
    outputs are not class scores). The model's train/eval mode is restored after."""
    passed = validation_pass(model, loader, loss_fn, device, precision, channels_last, metrics, target_key)
    return validation_values(passed, metrics)


def validation_pass(
    model: nn.Module,
    loader: Iterable,
    loss_fn: Callable,
    device: torch.device,
    precision: Precision,
    channels_last: bool,
    metrics: Mapping[str, Any],
    target_key: str,
) -> PassSums:
    """The forwards over ``loader``, summed on this process; no collective (with several processes the
    sums are added in :func:`validation_values`)."""
    batch_metrics = {name: metric for name, metric in metrics.items() if not uses_loss(metric)}
    for metric in batch_metrics.values():
        metric.reset()
        if isinstance(metric, nn.Module):
            metric.to(device)
    loss_sum = torch.zeros((), device=device)
    elements = torch.zeros((), device=device, dtype=torch.long)
    sums = sums_its_loss(loss_fn, model)  # a summed loss: its sum over the samples, per sample
    said = False
    # Draws inside (a model's noise, the loader's seed) come from copies: training draws as without it.
    with evaluation_mode(model), torch.no_grad(), kept_random_state():
        for batch in loader:
            batch = to_device(batch, device, channels_last)
            with precision.autocast():
                result = forward(model, batch, loss_fn, target_key)
            count = items_in_outputs(result.outputs) if isinstance(loss_fn, ModelLoss) else None
            said = said or count is not None
            if sums:
                count = count_samples(batch, target_key)
            elif count is None:
                scored = scored_targets(batch, result.targets, loss_fn)
                count = loss_elements(loss_fn, scored, count_samples(batch, target_key))
            # A batch whose targets are all ignored (all padding) has no items: its own mean is 0/0
            # (NaN), and it adds nothing to the mean over the items of the others.
            weighted = result.loss.float() if sums else result.loss.float() * count
            has_items = count != 0  # a count on the device is compared there: no read, no copy
            if isinstance(has_items, torch.Tensor):
                loss_sum += weighted.where(has_items, 0.0)
            elif has_items:
                loss_sum += weighted
            elements = elements + count  # class weights make it a float
            logits = logits_of(result.outputs)
            if logits is not None and isinstance(result.targets, torch.Tensor):
                for metric in batch_metrics.values():
                    metric.update(logits, result.targets)
    return PassSums(loss_sum, elements, said, batch_metrics)


def validation_values(passed: PassSums, metrics: Mapping[str, Any]) -> dict[str, float]:
    """The pass's sums over every process and the metrics' values, read from the device once."""
    loss_sum, elements = sum_across_processes(passed.loss_sum), sum_across_processes(passed.elements)
    values = {"val/loss": loss_sum / elements.where(elements > 0, torch.ones_like(elements))}
    for name, metric in passed.batch_metrics.items():
        if (value := metric.compute()) is not None:
            values[f"val/{name}"] = value
    values = to_floats({**values, ELEMENTS: elements})  # one read of everything from the device
    if passed.said:  # counts the model said: none at all is no mean
        check_counted(values[ELEMENTS])
    del values[ELEMENTS]
    for name, metric in metrics.items():
        if uses_loss(metric):
            values[f"val/{name}"] = metric.from_validation_loss(values["val/loss"])
    return values
