"""Test-only model that runs out of memory: runner's MLP, which raises ``torch.OutOfMemoryError`` (as
a GPU would) for a batch of more than ``limit`` samples, on every process or on ``rank`` alone; in
training and evaluation alike, or only ``when`` it is "training" (gradients on) or "evaluation". With
``norm`` its inputs go through a BatchNorm first: buffers that DDP's processes must share. With
``host_noise`` its outputs get noise drawn from Python's ``random`` (a model that draws on the host)."""

import os
import random
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from runner.models import mlp


class RunsOutAbove(nn.Module):
    def __init__(
        self,
        input_shape: Sequence[int],
        num_outputs: int,
        hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
        limit: int = 8,
        rank: int | None = None,
        when: str = "always",
        norm: bool = False,
        host_noise: bool = False,
    ):
        super().__init__()
        self.body = mlp(input_shape, num_outputs, hidden, dropout)
        features = int(torch.tensor(input_shape).prod())
        self.norm = nn.Sequential(nn.Flatten(), nn.BatchNorm1d(features)) if norm else nn.Identity()
        self.limit, self.rank, self.when, self.host_noise = limit, rank, when, host_noise

    def forward(self, inputs: Tensor) -> Tensor:
        here = self.rank is None or int(os.environ.get("RANK", "0")) == self.rank
        now = {"always": True, "training": torch.is_grad_enabled(), "evaluation": not torch.is_grad_enabled()}
        # A model that draws runs out after its draws (dropout's masks, Python's noise), as a late layer
        # would.
        draws = self.host_noise and self.training
        drawn = self.body(self.norm(inputs)) + random.gauss(0, 0.1) if draws else None
        if here and now[self.when] and len(inputs) > self.limit:
            raise torch.OutOfMemoryError(f"simulated: a batch of {len(inputs)} > {self.limit} samples")
        return drawn if drawn is not None else self.body(self.norm(inputs))
