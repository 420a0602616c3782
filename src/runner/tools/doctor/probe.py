"""What the debugging checklist's checks share: what ``train`` would build, what each check finds,
and what the checks pass on to each other as they run."""

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.training.batches import as_mapping, first_tensor, is_pair, logits_of
from runner.training.precision import Precision

PASS, WARN, FAIL, SKIP = "pass", "warn", "FAIL", "skip"
# NaN or Inf that the model's forward makes before any training step: no learning rate is to blame.
ADVICE_FORWARD_NAN = (
    "find the operation in forward that makes it: log or sqrt of values <= 0, 0/0, an exp that "
    "overflows; clamp its input or add a small epsilon"
)
ADVICE_NAN_WEIGHTS = (
    "the model was built or loaded with NaN weights: check its initialisation, or load a checkpoint "
    "saved before the loss went NaN"
)
ADVICE_NAN_LOSS = (
    "check the loss and the targets: log of 0 (probabilities where logits belong), a division by "
    "zero, targets far out of scale (normalize them)"
)
ADVICE_BAD_DATA = "fix the data: clean or drop the bad samples, check the preprocessing"
ADVICE_LOSS_FIRST = "fix the NaN loss first (check 4): no training step can mend it"


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
    target_key: str  # where a dict batch holds its targets
    micro_batches_per_step: int = 1  # accumulate: a step the model writes is tried on a whole window

    @classmethod
    def of(cls, config: Any, prepared: Any, optimizer_factory: Callable[[nn.Module], Any]) -> "Setup":
        """From a run's config and what ``experiment.setup.prepare`` built of it: the one place the
        command and the tests take doctor's inputs from."""
        return cls(
            model=prepared.parts.model,
            optimizer_factory=optimizer_factory,
            loss_fn=prepared.parts.loss_fn,
            train_loader=prepared.train_loader,
            val_loader=prepared.val_loader,
            device=prepared.device,
            precision=prepared.precision,
            clip=config.clip,
            target_key=config.data.target_key,
            micro_batches_per_step=config.accumulate,
        )


@dataclass
class Finding:
    status: str
    found: str
    advice: str = ""


@dataclass
class Probe:
    """What the checks share as they run: the first batch (on the device) and its loss, and whether an
    earlier check advised a lower learning rate (a later one must not then advise a higher one)."""

    setup: Setup
    batch: Any = None  # the first training batch, moved to the device; None when it cannot be used
    loss: torch.Tensor | None = None
    advised_lower_lr: bool = False


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


def model_outputs(outputs: Any) -> list[torch.Tensor]:
    """What the model predicts: its logits where it returns them (not its own loss), else every
    tensor it returned."""
    logits = logits_of(outputs)
    return [logits] if logits is not None else [tensor for _, tensor in named_tensors(outputs)]


def count_nonfinite(tensors: Iterable[torch.Tensor]) -> tuple[int, int, int]:
    """How many NaN and how many infinite values the tensors hold, and how many values in all."""
    nan = inf = total = 0
    for tensor in tensors:
        total += tensor.numel()
        if tensor.is_floating_point() or tensor.is_complex():
            nan += int(torch.isnan(tensor).sum())
            inf += int(torch.isinf(tensor).sum())
    return nan, inf, total


def nonfinite_kind(nan: int, inf: int) -> str:
    """``NaN``, ``Inf`` or ``NaN and Inf``, as a finding names them; empty where there is neither."""
    return " and ".join(kind for kind, count in (("NaN", nan), ("Inf", inf)) if count)


def nonfinite_text(what: str, tensors: Iterable[torch.Tensor]) -> str | None:
    """``<what> contain 12 NaN of 128 values``; None where every value is finite."""
    nan, inf, total = count_nonfinite(tensors)
    if not nan and not inf:
        return None
    counts = " and ".join(f"{count} {kind}" for kind, count in (("NaN", nan), ("Inf", inf)) if count)
    return f"{what} contain {counts} of {total} values"


def value_text(value: float) -> str:
    """A loss as a finding shows it: ``NaN``, ``Inf``, ``-Inf`` or four significant digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def nonfinite_parameters(model: nn.Module) -> tuple[list[str], str]:
    """The names of the parameters holding NaN or Inf, and which of the two they hold."""
    names, nan, inf = [], 0, 0
    for name, parameter in model.named_parameters():
        bad_nan, bad_inf, _ = count_nonfinite([parameter.detach()])
        if bad_nan or bad_inf:
            names.append(name)
            nan, inf = nan + bad_nan, inf + bad_inf
    return names, nonfinite_kind(nan, inf)


def same(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Equal, with NaN equal to NaN where both have it (``torch.equal`` says NaN differs from itself)."""
    if first.shape != second.shape or first.dtype != second.dtype:
        return False
    if torch.equal(first, second):
        return True
    if not (first.is_floating_point() or first.is_complex()):
        return False
    first_nan, second_nan = torch.isnan(first), torch.isnan(second)
    return torch.equal(first_nan, second_nan) and torch.equal(first[~first_nan], second[~second_nan])
