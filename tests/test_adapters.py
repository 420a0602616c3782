"""``checkpoint.trainable_only``: a run with a frozen base (peft's LoRA, or ``freeze``) saves what
trains and the sha256 of the frozen weights; resume continues bit for bit, load_model and eval check
the base; ``runner export`` writes the weights (safetensors) or the adapter (peft) in the library's own
format. In-process with the real composed config."""

import logging
from pathlib import Path

import pytest
import torch
from conftest import composed
from hydra.utils import instantiate

from runner.checkpoint.files import CheckpointError
from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.cli.tools import main_export
from runner.config.errors import ConfigError
from runner.config.trust import folder_targets
from runner.data import load_digits
from runner.experiment.train import train
from runner.tools.evaluation import evaluate_checkpoint
from runner.tools.trained_model import load_trained_model

peft = pytest.importorskip("peft", reason="peft (the peft extra)")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors (the peft extra)")
PLUGINS = Path(__file__).parent / "plugins"
TRUSTED = {"adapters.lora", "adapters.pretrained"}
ALLOW = f"allow_targets={','.join(sorted(TRUSTED))}"


@pytest.fixture
def base(tmp_path, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(PLUGINS))
    from adapters import save_base

    path = tmp_path / "base.safetensors"
    save_base(str(path))
    return path


@pytest.fixture
def run(tmp_path, caplog, base):
    caplog.set_level(logging.INFO, logger="runner")

    def start(*overrides: str, model: str = "lora", run_dir: Path | None = None) -> Path:
        config = composed("data.batch_size=64", "seed=3", "optimizer.lr=0.01", *overrides)
        config.model = {"_target_": f"adapters.{model}", "path": str(base)}
        run_dir = run_dir or tmp_path / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        train(config, run_dir, build=instantiate)
        return run_dir

    return start


def export(run_dir: Path, format: str, *more: str) -> Path:
    main_export([str(run_dir), "--format", format, ALLOW, *more])
    return run_dir / "export" / format


def refused_export(capsys, *arguments: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main_export(list(arguments))
    assert exited.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "Traceback" not in message
    return message


def last(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt")


def nbytes(state: dict) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in state.values())


def test_a_lora_checkpoint_holds_what_trains_and_the_bases_digest(run, tmp_path, caplog):
    full_dir = run("trainer.max_steps=3", run_dir=tmp_path / "full")
    run_dir = run("trainer.max_steps=3", "checkpoint.trainable_only=true")
    full, kept = last(full_dir), last(run_dir)
    assert set(kept["model_state_dict"]) == {name for name in full["model_state_dict"] if ".lora_" in name}
    assert kept["frozen_weights_sha256"].startswith("sha256:") and "frozen_weights_sha256" not in full
    for name, value in kept["model_state_dict"].items():
        assert torch.equal(value, full["model_state_dict"][name]), name  # the same training
    adapter = (export(run_dir, "peft") / "adapter_model.safetensors").stat().st_size
    assert nbytes(kept["model_state_dict"]) <= 2 * adapter  # the weights it keeps: the adapter's size
    sizes = [(d / "checkpoints" / "last.pt").stat().st_size for d in (run_dir, full_dir)]
    print(f"adapter {adapter} B, kept weights {nbytes(kept['model_state_dict'])} B, checkpoints {sizes} B")
    assert sizes[0] < sizes[1] / 3, sizes
    assert "weights only, the frozen ones by their sha256" in caplog.text  # the run plan's checkpoints row


def test_a_trainable_only_run_resumes_bit_for_bit(run, tmp_path):
    common = ("checkpoint.trainable_only=true",)
    straight = run(*common, "trainer.max_steps=10", run_dir=tmp_path / "a")
    run(*common, "trainer.max_steps=4", run_dir=tmp_path / "b")
    resumed = run(*common, "trainer.max_steps=10", f"resume={tmp_path / 'b'}", run_dir=tmp_path / "b")
    first, second = last(straight), last(resumed)
    assert first["global_step"] == second["global_step"] == 10
    assert first["model_state_dict"].keys() == second["model_state_dict"].keys()
    for name, value in first["model_state_dict"].items():
        assert torch.equal(second["model_state_dict"][name], value), name
    for index, values in first["optimizer_state_dict"]["state"].items():
        for key, value in values.items():
            assert torch.equal(second["optimizer_state_dict"]["state"][index][key], value), (index, key)


def test_a_base_that_changed_is_refused_in_one_line_by_resume_load_model_and_eval(run, tmp_path, base):
    from adapters import save_base

    run_dir = run("trainer.max_steps=2", "checkpoint.trainable_only=true")
    load_trained_model(run_dir, instantiate, TRUSTED)  # the same base: loads
    save_base(str(base), seed=1)  # the pretrained file replaced
    expected = "holds only the trained weights (checkpoint.trainable_only=true); the frozen weights it"
    attempts = [
        lambda: run("checkpoint.trainable_only=true", f"resume={run_dir}", run_dir=run_dir),
        lambda: load_trained_model(run_dir, instantiate, TRUSTED),
        lambda: evaluate_checkpoint(run_dir / "checkpoints" / "last.pt", "cpu", instantiate, "val",
                                    TRUSTED | folder_targets(CONFIG_DIR)),
    ]  # fmt: skip
    for attempt in attempts:
        with pytest.raises(CheckpointError) as refused:
            attempt()
        message = str(refused.value)
        assert expected in message and "the base model changed since" in message and "\n" not in message


def test_the_exported_adapter_loads_in_peft_to_identical_logits(run, base):
    from adapters import pretrained

    run_dir = run("trainer.max_steps=5", "checkpoint.trainable_only=true")
    exported = export(run_dir, "peft")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {path.name for path in exported.iterdir()}
    reloaded = peft.PeftModel.from_pretrained(pretrained(str(base)), str(exported)).eval()
    trained = load_trained_model(run_dir, instantiate, TRUSTED)
    images = torch.stack([load_digits()[1][index][0] for index in range(64)])
    with torch.no_grad():
        assert torch.equal(reloaded(images), trained(images))
        assert not torch.equal(pretrained(str(base))(images), trained(images))  # it did train


def test_freeze_and_safetensors_export_every_weight(run, capsys):
    """runner's own ``freeze``: the checkpoint keeps fc2, the export holds the whole model."""
    run_dir = run(
        "trainer.max_steps=3", "checkpoint.trainable_only=true", "freeze=[fc1.*]", model="pretrained"
    )
    assert set(last(run_dir)["model_state_dict"]) == {"fc2.weight", "fc2.bias"}
    exported = export(run_dir, "safetensors")
    assert f"wrote {exported} (safetensors)" in capsys.readouterr().out
    written = safetensors_torch.load_file(str(exported / "model.safetensors"))
    trained = load_trained_model(run_dir, instantiate, TRUSTED).state_dict()
    assert written.keys() == trained.keys()
    assert all(torch.equal(written[name], trained[name]) for name in trained)
    # Asked again: the export is kept, never overwritten; a model with no adapter has none to export.
    before = (exported / "model.safetensors").stat().st_mtime_ns
    assert "exists and is kept as it is" in refused_export(
        capsys, str(run_dir), "--format", "safetensors", ALLOW
    )
    assert (exported / "model.safetensors").stat().st_mtime_ns == before
    message = refused_export(capsys, str(run_dir), "--format", "peft", ALLOW)
    assert "the run's model (Base) holds no peft models (PeftModel)" in message
    assert not (run_dir / "export" / "peft").exists()
    assert "--format must be one of safetensors, peft" in refused_export(
        capsys, str(run_dir), "--format", "onnx"
    )


def test_trainable_only_with_ema_is_refused_in_one_line(run, tmp_path):
    with pytest.raises(ConfigError) as refused:
        run("checkpoint.trainable_only=true", "callbacks=ema", run_dir=tmp_path / "refused")
    assert str(refused.value).startswith(
        "checkpoint.trainable_only=true with callbacks.ema (ema): the averages"
    )
    assert not (tmp_path / "refused").exists() or not list(
        (tmp_path / "refused").iterdir()
    )  # nothing written
