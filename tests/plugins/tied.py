"""A model with one weight under two names (as GPT-2 ties its embedding and its head): a square hidden
layer whose weight the next layer shares."""

import math

from torch import nn


class TiedNet(nn.Module):
    def __init__(self, input_shape: list[int], num_outputs: int, hidden: int = 16) -> None:
        super().__init__()
        self.encode = nn.Linear(math.prod(input_shape), hidden)
        self.first = nn.Linear(hidden, hidden)
        self.second = nn.Linear(hidden, hidden)
        self.second.weight = self.first.weight
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, inputs):
        hidden = self.encode(inputs.flatten(1)).relu()
        return self.out(self.second(self.first(hidden).relu()).relu())
