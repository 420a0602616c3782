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


class OwnGenerator(Augmented):
    """Draws from a generator it made once (``recipe=False``), which the run's seed does not reach; or,
    as docs/own-model.md says to, from one made in __getitem__ from the sample's seed."""

    def __init__(self, inner: Dataset, recipe: bool) -> None:
        super().__init__(inner)
        self.recipe = recipe
        self.rng = np.random.default_rng()

    def __getitem__(self, index: int):
        inputs, label = self.inner[index]
        rng = np.random.default_rng(torch.initial_seed()) if self.recipe else self.rng
        return inputs + torch.from_numpy(rng.normal(0.0, 0.3, inputs.shape)).to(inputs.dtype), label


def own_generator_classification(recipe: bool = False, **kwargs):
    train, val = make_classification(**kwargs)
    return OwnGenerator(train, recipe), val
