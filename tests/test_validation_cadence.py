"""When the loop validates (``training/cadence.py``), read from what the real loop logs: every
``val_every_n_steps`` steps, every ``val_every_n_epochs`` epochs, and at the run's end, each step at
most once, whichever of them fall on it."""

import pytest
import torch
from conftest import read_scalars
from torch import nn
from torch.utils.data import TensorDataset

from runner.data.loading import make_loaders
from runner.observe.writer import TensorBoardLogger
from runner.training.engine import Hooks, Loaders, LoopSettings, fit
from runner.training.precision import resolve_precision
from runner.training.schedules import build_scheduler
from runner.training.step import Learner

CPU = torch.device("cpu")


def validated_steps(tmp_path, every_n_steps, every_n_epochs, max_steps) -> list[int]:
    """The steps whose validation was logged: 12 samples in batches of 4, 3 steps an epoch, 2 epochs."""
    generator = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(12, 3, generator=generator), torch.randn(12, 1, generator=generator))
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train, val, sampler = make_loaders(
        dataset, dataset, 4, shuffle=False, num_workers=0, seed=0, pin_memory=False
    )
    settings = LoopSettings(
        max_steps=max_steps, max_epochs=2, micro_batches_per_step=1, clip_norm=None, log_every_n_steps=1,
        val_every_n_epochs=every_n_epochs, val_every_n_steps=every_n_steps, monitor="val/loss",
        monitor_mode="min", metrics={}, on_nonfinite="raise", max_nonfinite_in_a_row=5,
    )  # fmt: skip
    learner = Learner(model, nn.MSELoss(), optimizer, resolve_precision("fp32", CPU), CPU, False, "labels")
    logger = TensorBoardLogger(tmp_path)
    scheduler = build_scheduler(optimizer, "none", 100, 0, 0.0, 1, 1.0)
    fit(learner, scheduler, Loaders(train, sampler, val), settings, Hooks(logger))
    logger.close()
    return [step for step, _ in read_scalars(tmp_path)["val/loss"]]


@pytest.mark.parametrize(
    ("every_n_steps", "every_n_epochs", "max_steps", "validated"),
    [
        (2, None, None, [2, 4, 6]),  # an epoch's end (step 3) is not on the steps' cadence
        (3, None, None, [3, 6]),  # the steps' cadence on an epoch's last step: validated there, once
        (None, 2, None, [6]),
        (4, None, 5, [4, 5]),  # the run's end, between two of the cadence's steps
    ],
)
def test_the_loop_validates_on_its_cadence_and_at_the_end_each_step_once(
    tmp_path, every_n_steps, every_n_epochs, max_steps, validated
):
    assert validated_steps(tmp_path, every_n_steps, every_n_epochs, max_steps) == validated
