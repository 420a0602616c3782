"""``data.prefetch_factor`` and ``data.persistent_workers`` reach the training and validation loaders,
with workers, and the run plan says them."""

import logging

from conftest import TINY, composed
from hydra.utils import instantiate

from runner.experiment.setup import prepare


def loaders(*overrides: str):
    config = composed(*TINY, *overrides)
    prepared = prepare(config, instantiate, 0)
    return prepared.train_loader, prepared.val_loader


def test_todays_defaults_and_the_settings_reach_both_loaders():
    default = loaders("data.num_workers=2")
    assert [(lo.prefetch_factor, lo.persistent_workers) for lo in default] == [(2, True)] * 2
    chosen = loaders("data.num_workers=2", "data.prefetch_factor=4", "data.persistent_workers=false")
    assert [(lo.prefetch_factor, lo.persistent_workers) for lo in chosen] == [(4, False)] * 2
    in_process = loaders("data.prefetch_factor=4")  # without workers there is nothing to read ahead
    assert [(lo.prefetch_factor, lo.persistent_workers) for lo in in_process] == [(None, False)] * 2


def test_the_run_plan_says_how_the_data_is_read(train_here, caplog):
    caplog.set_level(logging.INFO, logger="runner")
    train_here(*TINY, "data.num_workers=1", "data.prefetch_factor=3", "data.persistent_workers=false")
    (plan,) = [message for message in caplog.messages if message.startswith("run plan")]
    row = " ".join(
        line.strip() for line in plan.split("data loading")[1].split("\n  effective")[0].splitlines()
    )
    assert row == (
        "1 worker process (data.num_workers), 3 batches each read ahead (data.prefetch_factor), started "
        "afresh each epoch (data.persistent_workers); each sample draws from its own seed (data.sample_seeds)"
    )
