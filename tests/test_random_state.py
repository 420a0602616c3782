"""Runner's forwards outside training (validation, the first-batch check) leave torch's, Python's and
numpy's random states as they found them, even when the model draws from all three in eval mode."""

import random

import numpy as np
import torch
from torch import nn

from runner.training.fit_check import check_fit
from runner.training.precision import resolve_precision
from runner.training.validation import evaluate

CPU = torch.device("cpu")


class DrawsEverywhere(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, inputs):
        noise = torch.randn_like(inputs) + random.random() + float(np.random.rand())
        return self.linear(inputs + noise)


def states():
    return torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def assert_same(before, after):
    assert torch.equal(before[0], after[0])
    assert before[1] == after[1]
    assert np.array_equal(before[2], after[2])


def test_validation_and_the_first_batch_check_draw_from_copies():
    torch.manual_seed(0)
    model, loss_fn = DrawsEverywhere(), nn.CrossEntropyLoss()
    batch = (torch.randn(8, 4), torch.randint(3, (8,)))
    precision = resolve_precision("fp32", CPU)
    before = states()
    evaluate(model, [batch, batch], loss_fn, CPU, precision, False, {}, "labels")
    assert_same(before, states())
    check_fit(model, batch, loss_fn, CPU, precision.autocast, "labels")
    assert_same(before, states())
    model(batch[0])  # and the model does draw: the states move outside
    assert not torch.equal(before[0], torch.get_rng_state())
