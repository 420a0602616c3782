"""A checkpoint forged by someone who read runner's code: each key replaced by a value of another type (or
a weight by something that is not one), its checksum computed again so that it matches. Every key a
checkpoint holds is checked for what it holds before anything uses it: ``export`` and ``eval`` refuse in
one line with exit 2, and ``runner.load_model`` raises one ``runner.UserError`` naming the key."""

import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY, composed, snapshot
from hostile_files import save_forged
from hydra.utils import instantiate

import runner
from runner.checkpoint.files import CheckpointError, load_checkpoint
from runner.cli.tools import main_eval, main_export
from runner.experiment.train import train

WEIGHT = "3.weight"  # model=mlp: the layer that trains with freeze=[1.*]
FORGED = {
    "averaged as a tensor": (
        {"averaged_model_state_dict": torch.ones(3)},
        "averaged_model_state_dict (Tensor)",
    ),
    "averaged as a dict of ints": (
        {"averaged_model_state_dict": {WEIGHT: 1}},
        "averaged_model_state_dict['3.",
    ),
    "averaged as text": ({"averaged_model_state_dict": "x"}, "averaged_model_state_dict (str)"),
    "a weight as text": ({"model_state_dict": "replace"}, "model_state_dict['3.weight'] (str)"),
    "a weight as a dict": ({"model_state_dict": {"shape": [4, 64]}}, "model_state_dict['3.weight'] (dict)"),
    "a weight named by a number": ({"model_state_dict": {5: torch.zeros(1)}}, "model_state_dict[5] (Tensor)"),
    "a sparse weight": ({"model_state_dict": "sparse"}, "it holds a sparse_coo tensor"),
    "a complex weight": (
        {"model_state_dict": "complex"},
        "other kinds of number: 3.weight (checkpoint torch.complex64, model torch.float32)",
    ),
    "the digest as a number": ({"frozen_weights_sha256": 5}, "frozen_weights_sha256 (int)"),
    "the digest as other text": (
        {"frozen_weights_sha256": "sha256:abc"},
        "frozen_weights_sha256 ('sha256:abc'",
    ),
    "the digest as nothing": ({"frozen_weights_sha256": None}, "frozen_weights_sha256 (NoneType)"),
    "callbacks as a number": ({"callbacks_state_dict": 5}, "callbacks_state_dict (int)"),
    "a stream's place as a list": ({"dataset_state_dict": [1]}, "dataset_state_dict (list)"),
    "a sampler's state as text": ({"sampler_state_dict": "x"}, "sampler_state_dict (str)"),
    "a carried state as a number": ({"carried_state_dict": 1.5}, "carried_state_dict (float)"),
    "versions as text": ({"versions": "1"}, "versions (str)"),
    "the window's place as text": (
        {"micro_batches_done_in_window": "0"},
        "micro_batches_done_in_window (str)",
    ),
    "the monitor as a number": ({"monitor": 1}, "monitor (int)"),
}


OVERRIDES = (*TINY, "seed=2", "checkpoint.trainable_only=true", "freeze=[1.*]")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("forged") / "run"
    run_dir.mkdir()
    train(composed(*OVERRIDES), run_dir, build=instantiate)
    return run_dir


@pytest.fixture(scope="module")
def trained(trained_run) -> dict:
    return torch.load(trained_run / "checkpoints" / "best.pt")


def forged_run(trained: dict, tmp_path, changes: dict) -> tuple:
    """A run directory whose one checkpoint is ``trained`` forged with ``changes``."""
    weights = dict(trained["model_state_dict"])
    if changes.get("model_state_dict") == "replace":
        changes = {"model_state_dict": {**weights, WEIGHT: "x"}}
    elif changes.get("model_state_dict") == "sparse":
        changes = {"model_state_dict": {**weights, WEIGHT: weights[WEIGHT].to_sparse()}}
    elif changes.get("model_state_dict") == "complex":
        changes = {"model_state_dict": {**weights, WEIGHT: weights[WEIGHT].to(torch.complex64)}}
    elif isinstance(changes.get("model_state_dict"), dict) and 5 not in changes["model_state_dict"]:
        changes = {"model_state_dict": {**weights, WEIGHT: changes["model_state_dict"]}}
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    path = tmp_path / "run" / "checkpoints" / "best.pt"
    return tmp_path / "run", save_forged(trained, path, **changes)


def one_line(capsys, command, arguments: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        command(arguments)
    error = capsys.readouterr().err
    assert exited.value.code == 2 and error.count("\n") == 1 and "Traceback" not in error, error
    return error


@pytest.mark.parametrize("case", FORGED)
def test_a_forged_key_is_one_line_in_export_eval_and_load_model(trained, tmp_path, capsys, case):
    changes, named = FORGED[case]
    run_dir, path = forged_run(trained, tmp_path, dict(changes))
    with pytest.raises(runner.UserError) as refused:
        runner.load_model(path)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert named in one_line(capsys, main_eval, [f"ckpt={path}"])
    assert named in one_line(capsys, main_export, [str(path), "--format", "safetensors"])
    assert sorted(path.name for path in run_dir.rglob("*")) == ["best.pt", "checkpoints"]  # nothing written


def test_a_meta_tensor_anywhere_is_refused_before_its_checksum_is_computed(trained, tmp_path):
    from hostile_files import save_unchecked

    path = save_unchecked({**trained, "optimizer_state_dict": {"x": torch.empty(3, device="meta")}},
                          tmp_path / "best.pt")  # fmt: skip
    with pytest.raises(CheckpointError, match="it holds a meta tensor, which runner never saves"):
        load_checkpoint(path)


def test_a_modules_extra_state_is_no_weight_and_loads(train_here):
    """``_extra_state`` holds what the module's ``get_extra_state`` returns: kept as it is, not refused."""
    run_dir = train_here(*TINY, "model._target_=extra_state.CountingNet", "~model.hidden", "~model.dropout")
    saved = torch.load(run_dir / "checkpoints" / "best.pt")["model_state_dict"]["_extra_state"]
    model = runner.load_model(run_dir, allow_targets="extra_state.CountingNet")
    assert saved["calls"] > 0 and model.calls == saved["calls"]


OPTIMIZER_FORGED = {
    "a slot as a number": (
        lambda saved: {**saved, "state": {0: {**saved["state"][0], "exp_avg": 5}}},
        "optimizer_state_dict['state'][0]['exp_avg'] (int)",
    ),
    "a slot of another shape": (
        lambda saved: {**saved, "state": {0: {**saved["state"][0], "exp_avg": torch.zeros(3)}}},
        "optimizer_state_dict['state'][0]['exp_avg'] (a tensor of shape [3])",
    ),
    "a slot as nothing": (
        lambda saved: {**saved, "state": {0: {**saved["state"][0], "exp_avg": None}}},
        "optimizer_state_dict['state'][0]['exp_avg'] (NoneType)",
    ),
    "a parameter's slots as a list": (
        lambda saved: {**saved, "state": {0: [1]}},
        "optimizer_state_dict['state'][0] (list)",
    ),
    "the groups as nothing": (
        lambda saved: {**saved, "param_groups": None},
        "optimizer_state_dict (no dicts of state and param_groups with params)",
    ),
    "the state as text": (lambda saved: {**saved, "state": "x"}, "optimizer_state_dict (no dicts of state"),
}


@pytest.mark.parametrize("case", OPTIMIZER_FORGED)
def test_a_forged_optimizer_state_is_one_line_on_resume_before_anything_is_written(
    trained_run, tmp_path, case
):
    forge, named = OPTIMIZER_FORGED[case]
    run_dir = Path(shutil.copytree(trained_run, tmp_path / "run"))
    for path in (run_dir / "checkpoints").iterdir():
        path.unlink()
    last = torch.load(trained_run / "checkpoints" / "last.pt")
    save_forged(
        last, run_dir / "checkpoints" / "last.pt", optimizer_state_dict=forge(last["optimizer_state_dict"])
    )
    before = snapshot(run_dir)
    with pytest.raises(CheckpointError) as refused:
        train(composed(*OVERRIDES, "trainer.max_steps=8", f"resume={run_dir}"), run_dir, build=instantiate)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(run_dir) == before
