"""Test-only data: the built-in classification with a random augmentation drawn, as torchvision's and
albumentations' transforms draw, from the global generators: torch's, Python's ``random`` and numpy's."""

import random

import numpy as np
import torch
from torch.utils.data import Dataset

from runner.data import make_classification


class Augmented(Dataset):
    def __init__(self, inner: Dataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):
        inputs, label = self.inner[index]
        noise = 0.3 * torch.randn_like(inputs)
        scale = random.uniform(0.8, 1.2)
        shift = float(np.random.normal(0.0, 0.1))
        return inputs * scale + noise + shift, label


def augmented_classification(**kwargs):
    """Training samples augmented; validation as it is."""
    train, val = make_classification(**kwargs)
    return Augmented(train), val


def mixing_collate(samples):
    """A collate function that draws too (as Mixup does): each batch's inputs scaled by one draw."""
    inputs, labels = torch.utils.data.default_collate(samples)
    return inputs * (1.0 + 0.1 * torch.rand(())), labels
