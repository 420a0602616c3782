"""Validation: mean loss (and accuracy for classification) under ``eval()`` and no_grad."""

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from runner.observe.writer import to_floats
from runner.training.distributed import sum_across_processes
from runner.training.precision import Precision
from runner.training.step import move_batch


def improves(value: float, best: float | None, mode: str) -> bool:
    """NaN never counts as best."""
    if not math.isfinite(value):
        return False
    return best is None or (value < best if mode == "min" else value > best)


def is_classification(outputs: torch.Tensor, targets: torch.Tensor) -> bool:
    """Class logits ``(N, C, ...)`` against integer targets ``(N, ...)``, as CrossEntropyLoss takes."""
    return outputs.ndim == targets.ndim + 1 and not targets.is_floating_point()


def evaluate(
    model: nn.Module,
    loader: Iterable,
    loss_fn: Callable,
    device: torch.device,
    precision: Precision,
    channels_last: bool = False,
) -> dict[str, float]:
    """Summed over every process's shard; the model's train/eval mode is restored after."""
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    samples = 0
    predictions = 0  # one per target element (per character for sequences)
    classification = False
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = move_batch(inputs, targets, device, channels_last)
            with precision.autocast():
                outputs = model(inputs)
                loss = loss_fn(outputs, targets)
            loss_sum += loss.float() * len(targets)
            samples += len(targets)
            classification = is_classification(outputs, targets)
            if classification:
                correct += (outputs.argmax(dim=1) == targets).sum()
                predictions += targets.numel()
    model.train(was_training)
    counts = sum_across_processes(torch.tensor([samples, predictions], device=device))
    loss_sum, correct = sum_across_processes(loss_sum), sum_across_processes(correct)
    metrics = {"val/loss": loss_sum / counts[0].clamp(min=1)}
    if classification:
        metrics["val/acc"] = correct.float() / counts[1].clamp(min=1)
    return to_floats(metrics)
