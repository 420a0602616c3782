"""What the debugging checklist's checks share: what ``train`` would build, what each check finds,
and what the checks pass on to each other as they run."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.training.batches import as_mapping, first_tensor, is_pair
from runner.training.precision import Precision

PASS, WARN, FAIL, SKIP = "pass", "warn", "FAIL", "skip"
# The memory and stability symptom table, as advice.
ADVICE_NAN = "lower the learning rate; then check the inputs and add gradient clipping (clip=1.0)"


@dataclass
class Setup:
    """What ``train`` would build, without writing anything."""

    model: nn.Module
    optimizer_factory: Callable[[nn.Module], torch.optim.Optimizer]
    loss_fn: Callable  # or ModelLoss (loss=from_model)
    train_loader: Any
    val_loader: Any
    device: torch.device
    precision: Precision
    clip: float | None
    target_key: str = "labels"  # where a dict batch holds its targets


@dataclass
class Finding:
    status: str
    found: str
    advice: str = ""


@dataclass
class Probe:
    """What the checks share as they run: the first batch (on the device) and its loss."""

    setup: Setup
    batch: Any = None  # the first training batch, moved to the device; None when it cannot be used
    loss: torch.Tensor | None = None


def named_values(batch: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """Every tensor in a batch, and every other value that holds none, by where it sits: ``inputs``
    and ``targets`` for a pair, the keys for a dict (``inputs.image`` when nested), ``[i]`` for
    other sequences, ``batch`` for a lone value."""
    mapping = as_mapping(batch)
    if mapping is not None:
        for key, value in mapping.items():
            yield from named_values(value, f"{name}.{key}" if name else str(key))
    elif isinstance(batch, tuple | list) and first_tensor(batch) is not None:
        labels = ("inputs", "targets") if not name and is_pair(batch) else None
        for index, value in enumerate(batch):
            yield from named_values(value, labels[index] if labels else f"{name or 'batch'}[{index}]")
    else:
        yield name or "batch", batch


def named_tensors(batch: Any) -> list[tuple[str, torch.Tensor]]:
    return [(name, value) for name, value in named_values(batch) if isinstance(value, torch.Tensor)]
