"""The model: two conv blocks, each conv, BatchNorm, ReLU and 2x2 max pooling, then dropout and a
linear head. Small enough that a run on the digits takes seconds on a CPU."""

import itertools
import math
from collections.abc import Sequence

from torch import nn


def small_cnn(
    input_shape: Sequence[int], num_outputs: int, channels: Sequence[int] = (16, 32), dropout: float = 0.25
) -> nn.Sequential:
    """``input_shape`` is ``(C, H, W)``; each block halves H and W, so they must divide by
    ``2 ** len(channels)``. The conv has no bias: the BatchNorm after it has its own."""
    if len(input_shape) != 3:
        raise ValueError(f"small_cnn needs image inputs (C, H, W), got input_shape={list(input_shape)}")
    in_channels, height, width = input_shape
    shrink = 2 ** len(channels)
    if height % shrink or width % shrink:
        raise ValueError(
            f"small_cnn halves H and W {len(channels)} times; input_shape={list(input_shape)} "
            f"needs H and W divisible by {shrink}"
        )
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise([in_channels, *channels]):
        layers += [
            nn.Conv2d(width_in, width_out, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(width_out),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]
    features = channels[-1] * math.prod([height // shrink, width // shrink])
    layers += [nn.Flatten(), nn.Dropout(dropout), nn.Linear(features, num_outputs)]
    return nn.Sequential(*layers)
