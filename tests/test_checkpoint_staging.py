"""A save copies the state into buffers kept from save to save (pinned, on a stream of its own, on a
GPU) and a thread writes them: the file holds the state of the moment it was saved, whatever the loop
did after; a save that must wait for the previous write says so, once."""

import logging
import time

import torch
from torch import nn

from runner.checkpoint.policy import PeriodicCheckpointer
from runner.checkpoint.staging import Staging
from runner.checkpoint.state import TrainState


class SlowToWrite:
    """Pickles slowly: a write that is still running when the next save comes."""

    def __reduce__(self):
        time.sleep(0.8)  # past what a save waits for silently (policy.WAIT_WORTH_SAYING)
        return (dict, ())


def test_the_buffers_are_kept_across_saves_and_hold_each_saves_moment():
    model = nn.Linear(3, 2)
    staging = Staging()
    first = staging.copy({"model": model.state_dict(), "step": 1})
    first.ready()
    held = first.value["model"]["weight"].clone()
    with torch.no_grad():
        model.weight.add_(1.0)  # the loop goes on: the copy is not the live tensor
    assert torch.equal(first.value["model"]["weight"], held)
    second = staging.copy({"model": model.state_dict(), "step": 2})
    assert second.value["model"]["weight"] is first.value["model"]["weight"]  # the same buffer, refilled
    assert torch.equal(second.value["model"]["weight"], model.weight.detach()) and second.value["step"] == 2
    grown = staging.copy({"model": nn.Linear(3, 4).state_dict()})  # another shape: a new buffer
    assert grown.value["model"]["weight"].shape == (4, 3)


def test_each_file_holds_its_own_moment_and_a_save_that_waits_says_so_once(tmp_path, caplog):
    model = nn.Linear(3, 2)
    checkpointer = PeriodicCheckpointer(
        tmp_path, lambda state: {"model": model.state_dict(), "step": state.step, "slow": SlowToWrite()},
        every_n_steps=1, every_n_epochs=None, keep_last=3, save_best=False,
    )  # fmt: skip
    weights = []
    with caplog.at_level(logging.WARNING, logger="runner"):
        for step in (1, 2, 3):
            checkpointer.after_step(TrainState(step=step))
            weights.append(model.weight.detach().clone())
            with torch.no_grad():
                model.weight.add_(1.0)
        checkpointer.close()
    for step, weight in zip((1, 2, 3), weights, strict=True):
        saved = torch.load(tmp_path / f"step_{step:08d}.pt", weights_only=False)
        assert saved["step"] == step and torch.equal(saved["model"]["weight"], weight)
    waits = [record for record in caplog.records if "for the previous one's write" in record.message]
    assert len(waits) == 1 and "at step 2" in waits[0].message
