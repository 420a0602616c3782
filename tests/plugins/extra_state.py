"""A model with state of its own beside its tensors (``get_extra_state``, as quantised or fused layers
keep theirs): its state dict holds ``_extra_state``, which is no tensor."""

import math

from torch import nn


class CountingNet(nn.Module):
    def __init__(self, input_shape: list[int], num_outputs: int) -> None:
        super().__init__()
        self.out = nn.Linear(math.prod(input_shape), num_outputs)
        self.calls = 0

    def forward(self, inputs):
        self.calls += 1
        return self.out(inputs.flatten(1))

    def get_extra_state(self) -> dict:
        return {"calls": self.calls}

    def set_extra_state(self, state: dict) -> None:
        self.calls = state["calls"]
