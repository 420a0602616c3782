"""A ``checkpoint.trainable_only`` run on a randomly initialised base can always be loaded: ``eval``,
``export`` and ``load_model`` build the base under the run's seed, as the run built it, and a base that
builds other weights each time is refused before the run writes anything."""

import pytest
import torch
from conftest import PLUGINS, TINY
from hydra.utils import instantiate

import runner
from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.cli.main import main
from runner.cli.tools import main_export
from runner.config.trust import folder_targets
from runner.tools.evaluation import evaluate_checkpoint

safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors (the peft extra)")
FROZEN = ("checkpoint.trainable_only=true", "freeze=[1.*]")  # model=mlp: 1 and 3 are its Linear layers
RUN = (*TINY, "seed=5", "trainer.max_steps=3")


def best(run_dir) -> dict:
    return torch.load(run_dir / "checkpoints" / "best.pt")


def test_a_random_base_run_loads_in_eval_export_and_load_model_with_its_trained_weights(train_here, tmp_path):
    full = train_here(*RUN, "freeze=[1.*]", run_dir=tmp_path / "full")  # every weight in its checkpoint
    kept = train_here(*RUN, *FROZEN, run_dir=tmp_path / "kept")
    trained = best(full)["model_state_dict"]
    assert set(best(kept)["model_state_dict"]) == {"3.weight", "3.bias"}
    states = torch.get_rng_state()
    loaded = runner.load_model(kept).state_dict()
    assert torch.equal(torch.get_rng_state(), states)  # the user's random states as they were
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[name], trained[name]) for name in trained)
    main_export([str(kept), "--format", "safetensors"])
    written = safetensors_torch.load_file(str(kept / "export" / "safetensors" / "model.safetensors"))
    assert all(torch.equal(written[name], trained[name]) for name in trained)
    trusted = folder_targets(CONFIG_DIR)
    metrics = [
        evaluate_checkpoint(run / "checkpoints" / "best.pt", "cpu", instantiate, "val", trusted)
        for run in (full, kept)
    ]
    assert {**metrics[0], "checkpoint": ""} == {**metrics[1], "checkpoint": ""}


def test_a_base_that_builds_other_weights_each_time_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", *RUN, *FROZEN, "model._target_=unseeded_base.unseeded_mlp", "hydra.run.dir=run"])
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    assert error.startswith(
        "runner: error: checkpoint.trainable_only=true, but the model's frozen base (2 parameters, such as "
        "1.weight) builds other weights each time under the same seed (seed=5)"
    )
    assert error.count("\n") == 1 and "seed the build" in error and "load pretrained weights" in error
    assert list(tmp_path.iterdir()) == []


def test_a_lora_on_a_random_base_loads_and_exports_its_adapter(train_here, tmp_path):
    pytest.importorskip("peft", reason="peft (the peft extra)")
    lora = ("model=mlp", "~model.input_shape", "~model.num_outputs", "~model.hidden", "~model.dropout",
            "model._target_=adapters.random_lora", "data.batch_size=64", "seed=4",
            "trainer.max_steps=3")  # fmt: skip
    full = train_here(*lora, run_dir=tmp_path / "full")
    kept = train_here(*lora, "checkpoint.trainable_only=true", run_dir=tmp_path / "kept")
    trained = best(full)["model_state_dict"]
    loaded = runner.load_model(kept, allow_targets="adapters.random_lora").state_dict()
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[name], trained[name]) for name in trained)
    main_export([str(kept), "--format", "peft", "allow_targets=adapters.random_lora"])
    adapter = safetensors_torch.load_file(str(kept / "export" / "peft" / "adapter_model.safetensors"))
    lora_weights = [value for name, value in trained.items() if ".lora_" in name]
    assert len(adapter) == len(lora_weights) == 4  # A and B of fc1 and fc2
    assert all(any(torch.equal(value, weight) for weight in lora_weights) for value in adapter.values())
