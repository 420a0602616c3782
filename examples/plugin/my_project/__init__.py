"""A user's own model and data, plugged into runner without editing it."""

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset


def linear_classifier(input_shape: list[int], num_outputs: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_outputs))


def xor_blobs(num_train: int = 256, num_val: int = 64, seed: int = 0):
    """Four blobs at the corners of a square; opposite corners share a label."""
    generator = torch.Generator().manual_seed(seed)

    def draw(num_samples: int) -> TensorDataset:
        corners = torch.randint(0, 2, (num_samples, 2), generator=generator)
        inputs = corners.float() * 4 - 2 + 0.5 * torch.randn(num_samples, 2, generator=generator)
        return TensorDataset(inputs, (corners[:, 0] ^ corners[:, 1]).long())

    return draw(num_train), draw(num_val)
