"""A user's own model and data, plugged into runner without editing it."""

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset


class TwoLayerNet(nn.Module):
    """A hidden ReLU layer: enough to separate XOR, which no linear model can."""

    def __init__(self, input_shape: list[int], num_outputs: int, hidden: int = 16):
        super().__init__()
        self.hidden = nn.Linear(math.prod(input_shape), hidden)
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(inputs.flatten(1))))


def linear_classifier(input_shape: list[int], num_outputs: int) -> nn.Module:
    """A linear model: on XOR it stays at chance, what a hidden layer fixes (``model=two_layer``)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_outputs))


def xor_blobs(num_train: int = 256, num_val: int = 64, seed: int = 0):
    """Four blobs at the corners of a square; opposite corners share a label."""
    generator = torch.Generator().manual_seed(seed)

    def draw(num_samples: int) -> TensorDataset:
        corners = torch.randint(0, 2, (num_samples, 2), generator=generator)
        inputs = corners.float() * 4 - 2 + 0.5 * torch.randn(num_samples, 2, generator=generator)
        return TensorDataset(inputs, (corners[:, 0] ^ corners[:, 1]).long())

    return draw(num_train), draw(num_val)
