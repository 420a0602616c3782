"""The Mixup recipe's collator (``docs/recipes.md``), as a test plug-in. timm cannot be imported here (pip's
torchvision, which timm imports, is built for CUDA torch and does not load with the CPU build), so
``Mixup`` is timm's ``timm.data.Mixup`` in its batch mode, kept to what the recipe uses and to its shape:
its arguments (``mixup_alpha``, ``label_smoothing``, ``num_classes``), its draw of ``lam`` from numpy's
global generator, the batch mixed with itself reversed, soft targets of shape (batch, classes), and its
refusal of an odd batch ("Batch size should be even when using this")."""

import numpy as np
import torch
from torch.utils.data import default_collate


def mixup_target(target: torch.Tensor, num_classes: int, lam: float, smoothing: float) -> torch.Tensor:
    """timm.data.mixup.mixup_target: smoothed one-hot targets, mixed as the inputs are."""
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    y1 = torch.full((target.size(0), num_classes), off_value).scatter_(1, target.view(-1, 1), on_value)
    y2 = torch.full((target.size(0), num_classes), off_value).scatter_(
        1, target.flip(0).view(-1, 1), on_value
    )
    return y1 * lam + y2 * (1.0 - lam)


class Mixup:
    def __init__(self, mixup_alpha: float = 1.0, label_smoothing: float = 0.1, num_classes: int = 1000):
        self.mixup_alpha, self.label_smoothing, self.num_classes = mixup_alpha, label_smoothing, num_classes

    def __call__(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert len(x) % 2 == 0, "Batch size should be even when using this"
        lam = float(np.random.beta(self.mixup_alpha, self.mixup_alpha))
        x = x * lam + x.flip(0) * (1.0 - lam)
        return x, mixup_target(target, self.num_classes, lam, self.label_smoothing)


class MixupCollate:
    """The recipe's collator: torch's default collation, then Mixup on the batch (in the recipe,
    ``timm.data.Mixup``)."""

    def __init__(self, **mixup_args) -> None:
        self.mixup = Mixup(**mixup_args)

    def __call__(self, samples: list) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mixup(*default_collate(samples))
