"""What a model with its own loss says its loss averaged over (``num_items_in_batch``), checked for
range: the engine weighs each micro-batch's loss and the validation mean by it, so a count of -3 or
10**30 would record a validation loss of -11.47 or 0, which then picks the best checkpoint and drives a
sweep. A count is one finite number >= 0 (0: a batch of padding alone); a count on an accelerator is
read on the first batch (``fit_check``), not every step (a read there waits for the device)."""

import math
from typing import Any

import torch

from runner.config.errors import UserError
from runner.training.device import host_number

MOST_ITEMS = 2**53  # past this a float count is no longer exact; no batch holds as many items


class ItemCountError(UserError):
    """A model's ``num_items_in_batch`` that is no count."""


def wrong(shown: str, why: str) -> ItemCountError:
    return ItemCountError(
        f"the model returned num_items_in_batch={shown}, {why}; it must be the number of items (tokens, "
        "samples) its loss averaged over in this batch: one finite number >= 0, an int or a 0-d tensor"
    )


def checked_count(items: int | float | torch.Tensor, read_device: bool = False) -> int | float | torch.Tensor:
    """``items`` if it is a count; a tensor on an accelerator is read only if ``read_device``."""
    if isinstance(items, torch.Tensor):
        if items.ndim != 0:
            raise wrong(f"a tensor of shape {list(items.shape)}", "not one number")
        if items.is_complex() or items.dtype == torch.bool:
            raise wrong(f"a {str(items.dtype).removeprefix('torch.')} tensor", "not a count")
        if items.device.type != "cpu" and not read_device:
            return items
        value: Any = host_number(items) if items.device.type == "cpu" else items.item()
    else:
        value = items
    if not math.isfinite(value) or not 0 <= value < MOST_ITEMS:
        raise wrong(
            str(value),
            "not a count" if not math.isfinite(value) or value < 0 else "more than any batch holds",
        )
    return items


def check_counted(elements: float) -> None:
    """Validation over batches whose counts the model said: none counted anything (all 0) would make
    the validation loss 0."""
    if elements <= 0:
        raise wrong("0 on every validation batch", "so the validation loss would average over nothing")
