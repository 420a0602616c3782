"""Test-only plug-ins that hand runner values out of range: a model with its own loss saying a wrong
``num_items_in_batch``, a sampler giving index -1, a model carrying a state no checkpoint can hold."""

from collections import deque

import torch
from any_model import OwnLossModel, dicts
from torch.utils.data import Sampler

from runner.models import mlp

SAID = {
    "zero": lambda: 0,
    "negative": lambda: -3,
    "huge": lambda: 10**30,
    "not-a-number": lambda: float("nan"),
    "vector": lambda: torch.ones(2, dtype=torch.long),
    "negative-tensor": lambda: torch.tensor(-3),
}


class SaysCount(OwnLossModel):
    def __init__(self, count: str, **_) -> None:  # the mlp option's own arguments are not used
        super().__init__()
        self.count = count

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        output = super().forward(features, labels)
        return {"loss": output.loss, "logits": output.logits, "num_items_in_batch": SAID[self.count]()}


def dict_batches(**_) -> tuple:
    return dicts()


class MinusOne(Sampler[int]):
    """0..N-1 with -1 first: Python's indexing would quietly read the last sample."""

    def __init__(self, data_source) -> None:
        self.size = len(data_source)

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter([-1, *range(1, self.size)])


class Junk:
    """A carried state whose state dict holds a deque (``weights_only`` loading refuses it)."""

    def state_dict(self) -> dict:
        return {"history": deque([1.0])}

    def load_state_dict(self, state: dict) -> None:
        pass

    def reset(self) -> None:
        pass


def carries_junk(**arguments) -> torch.nn.Module:
    model = mlp(**arguments)
    model.carried_state = Junk()
    return model
