"""A model whose first layer draws its weights from a generator of its own, seeded from the operating
system: built twice under one seed, that layer differs (tests/test_trainable_only_loading.py)."""

import math
import secrets

import torch
from torch import nn


def unseeded_mlp(input_shape: list[int], num_outputs: int, hidden: list[int] = (16,), dropout: float = 0.0):
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    first = nn.Linear(math.prod(input_shape), hidden[0])
    with torch.no_grad():
        first.weight.copy_(torch.randn(first.weight.shape, generator=generator) * 0.1)
    return nn.Sequential(nn.Flatten(), first, nn.ReLU(), nn.Linear(hidden[0], num_outputs))
