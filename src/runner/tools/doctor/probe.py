"""What the debugging checklist's checks share: what ``train`` would build, what each check finds,
and what the checks pass on to each other as they run."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.training.precision import Precision

PASS, WARN, FAIL, SKIP = "pass", "warn", "FAIL", "skip"
# The memory and stability symptom table, as advice.
ADVICE_NAN = "lower the learning rate; then check the inputs and add gradient clipping (clip=1.0)"


@dataclass
class Setup:
    """What ``train`` would build, without writing anything."""

    model: nn.Module
    optimizer_factory: Callable[[nn.Module], torch.optim.Optimizer]
    loss_fn: Callable
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
    batch: Any = None  # as the loader yields it
    inputs: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    loss: torch.Tensor | None = None
