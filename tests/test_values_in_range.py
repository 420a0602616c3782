"""Values checked for range before anything is written: no setting takes NaN, what the model, the sampler
or the data give on the first batch (counts, indices, carried state), and the values a checkpoint
holds. Through the real command line, in this process (``main_train``, ``main``)."""

import pytest
import torch
from conftest import PLUGINS, TINY, refused_here, snapshot

from runner.checkpoint.files import CHECKSUM_KEY, atomic_save
from runner.cli.main import main
from runner.cli.train import main_train

NAN_SETTINGS = {
    "callbacks.early_stopping.min_delta": [
        "callbacks=early_stopping",
        "callbacks.early_stopping.min_delta=nan",
    ],
    "scheduler.factor": ["scheduler=plateau", "scheduler.factor=nan"],
    "callbacks.ema.decay": ["callbacks=ema", "callbacks.ema.decay=nan"],
    "loss.label_smoothing": ["+loss.label_smoothing=nan"],
}


@pytest.mark.parametrize("key", NAN_SETTINGS)
def test_no_setting_takes_nan(tmp_path, capsys, key):
    refused_here(capsys, lambda: main_train([*TINY, *NAN_SETTINGS[key], f"hydra.run.dir={tmp_path / 'run'}"]),
                 f"{key}=nan is not allowed")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


REGRESSION = ["data=regression", "data.dataset.num_train=64", "data.dataset.num_val=32", "data.batch_size=16"]
OWN_LOSS = ["model._target_=bad_values.SaysCount", "data.dataset._target_=bad_values.dict_batches",
            "loss=from_model"]  # fmt: skip
# Refused on the first batch, before the run writes anything.
FIRST_BATCH = {
    "monitor on a regression": (
        [*REGRESSION, "checkpoint.monitor=val/acc", "checkpoint.mode=max"],
        "checkpoint.monitor=val/acc is not logged by this run; it logs val/loss",
    ),
    "num_items_in_batch negative": (
        [*OWN_LOSS, "+model.count=negative"],
        "the model returned num_items_in_batch=-3, not a count",
    ),
    "num_items_in_batch negative tensor": (
        [*OWN_LOSS, "+model.count=negative-tensor"],
        "num_items_in_batch=-3, not a count",
    ),
    "num_items_in_batch 10**30": (
        [*OWN_LOSS, "+model.count=huge"],
        f"num_items_in_batch={10**30}, more than any batch holds",
    ),
    "num_items_in_batch nan": (
        [*OWN_LOSS, "+model.count=not-a-number"],
        "num_items_in_batch=nan, not a count",
    ),
    "num_items_in_batch 1-d": (
        [*OWN_LOSS, "+model.count=vector"],
        "num_items_in_batch=a tensor of shape [2], not one number",
    ),
    "sampler index -1": (
        ["data.sampler={_target_: bad_values.MinusOne}"],
        "data.sampler (MinusOne) gave index -1 in epoch 0; the training set has 64 samples",
    ),
    "carried state no checkpoint holds": (
        ["model._target_=bad_values.carries_junk"],
        "the model's carried_state (carried_state_dict)['history'] is a collections.deque",
    ),
}


@pytest.mark.parametrize("case", FIRST_BATCH)
def test_values_out_of_range_are_refused_before_the_run_writes(tmp_path, capsys, monkeypatch, case):
    overrides, says = FIRST_BATCH[case]
    monkeypatch.syspath_prepend(str(PLUGINS))
    run_dir = tmp_path / "run"
    refused_here(capsys, lambda: main_train([*TINY, *overrides, f"hydra.run.dir={run_dir}"]), says)
    assert list(tmp_path.iterdir()) == []


def test_a_count_of_0_on_every_validation_batch_is_refused_not_a_loss_of_0(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    run_dir = tmp_path / "run"
    arguments = [*TINY, *OWN_LOSS, "+model.count=zero", f"hydra.run.dir={run_dir}"]
    refused_here(capsys, lambda: main_train(arguments), "num_items_in_batch=0 on every validation batch")
    assert not (run_dir / "checkpoints" / "best.pt").exists()


FORGED = {
    "global_step": (-5, "global_step (-5: a count, >= 0)"),
    "epoch": (-1, "epoch (-1: a count, >= 0)"),
    "best_val": (float("nan"), "best_val (nan: a finite number or None)"),
    "best_val_step": (10**6, "best_val_step (1000000: a step in [0, global_step])"),
    "seed": (-1, "seed (-1: in [0, 2**32))"),
    "world_size": (0, "world_size (0: a number of processes, >= 1)"),
}


def test_checkpoint_values_out_of_range_are_refused_by_name(finished, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    last = finished / "checkpoints" / "last.pt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint.pop(CHECKSUM_KEY)
    for key, (value, says) in FORGED.items():
        forged = tmp_path / f"{key}.pt"
        atomic_save({**checkpoint, key: value}, forged)
        refused_here(capsys, lambda forged=forged: main(["eval", f"ckpt={forged}"]), says)
    atomic_save({**checkpoint, "global_step": -5}, last)  # a resume reads it too, and writes nothing
    before = snapshot(finished)
    refused_here(capsys, lambda: main_train([f"resume={last}"]), "global_step (-5: a count, >= 0)")
    assert snapshot(finished) == before
