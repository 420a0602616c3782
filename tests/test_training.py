"""Training behaviour, in this process: the real config composed by Hydra's compose API, the run
function called directly (the command line's own behaviour is tested in the CLI tests)."""

import json
import math

import pytest
import torch
import yaml
from conftest import REPO, read_scalars

from runner.config.errors import ConfigError
from runner.models import mlp
from runner.training.nonfinite import NonFiniteError

TINY = (
    "data=classification", "data.dataset.num_train=64", "data.dataset.num_val=32", "data.batch_size=16",
    "trainer.max_steps=4", "trainer.log_every_n_steps=1",
)  # fmt: skip
NAN_DATA = (
    "data=regression", "data.dataset._target_=broken.one_nan_sample", "data.dataset.num_train=64",
    "data.batch_size=16", "trainer.max_epochs=2", "trainer.log_every_n_steps=1", "optimizer.lr=0.01",
)  # fmt: skip


def test_gradient_clipping_experiment(train_here):
    """The gradient-clipping experiment: seed 42, Linear(10,20)-ReLU-Linear(20,1), x=randn(32,10),
    y=randn(32,1)*50, MSE; total grad norm 38.7677 before clipping to 1.0, 1.0 after."""
    run_dir = train_here(
        "seed=42", "data=regression", "data.dataset.num_train=32", "data.dataset.seed=null",
        "data.batch_size=32", "model.hidden=[20]", "optimizer=sgd", "clip=1.0", "trainer.max_steps=1",
        "trainer.log_every_n_steps=1",
    )  # fmt: skip
    scalars = read_scalars(run_dir)
    assert round(scalars["train/grad_norm"][0][1], 4) == 38.7677
    assert round(scalars["train/grad_norm_clipped"][0][1], 4) == 1.0


def test_default_experiment_learns_the_digits(train_here):
    """The default config: real data, >= 95% validation accuracy."""
    run_dir = train_here()
    scalars = read_scalars(run_dir)
    assert scalars["val/acc"][-1][1] >= 0.95
    assert scalars["train/loss"][-1][0] == 900  # 45 optimizer steps x 20 epochs
    split = json.loads((run_dir / "data_split.json").read_text())
    assert split["train_size"] + split["val_size"] == 1797
    assert not set(split["train_indices"]) & set(split["val_indices"])


REGRESSION = ("data=regression", "data.dataset.num_train=32", "data.batch_size=16", "trainer.max_steps=2")


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        (("checkpoint.monitor=val/acc", "checkpoint.mode=max"), "checkpoint.monitor"),
        (("scheduler=plateau", "scheduler.monitor=val/acc"), "scheduler.monitor"),
        (
            ("callbacks=early_stopping", "callbacks.early_stopping.monitor=val/acc"),
            "callbacks.early_stopping.monitor",
        ),
    ],
)
def test_a_monitored_metric_that_gives_no_value_is_named_at_the_first_validation(
    train_here, overrides, setting
):
    """Accuracy is configured (the default metrics) but counts nothing on a regression: the config check
    cannot know, so the same check runs on what validation gave, naming the setting."""
    with pytest.raises(ConfigError, match=f"^{setting}=val/acc is not logged by this run; it logs val/loss "):
        train_here(*REGRESSION, *overrides)


def test_accumulation_scheduler_and_drawn_seed(train_here, caplog):
    run_dir = train_here(
        *TINY, "accumulate=2", "trainer.max_steps=null", "trainer.max_epochs=2", "scheduler=cosine",
        "scheduler.warmup_steps=2", "optimizer.lr=0.01", "seed=null",
    )  # fmt: skip
    seed = yaml.safe_load((run_dir / "run.yaml").read_text())["runtime"]["seed"]  # seed=null: drawn, recorded
    assert isinstance(seed, int) and 0 <= seed < 2**32
    assert f"seed             {seed} (drawn)" in caplog.text
    assert "effective batch  32 = 16 (data.batch_size) x 2 (accumulate)" in caplog.text
    assert "optimizer steps  4 planned" in caplog.text and "2 optimizer steps per epoch" in caplog.text
    scalars = read_scalars(run_dir)
    assert [step for step, _ in scalars["train/lr"]] == [1, 2, 3, 4]
    assert [value for _, value in scalars["train/lr"]][:2] == pytest.approx([0.005, 0.01])
    assert [step for step, _ in scalars["val/loss"]] == [2, 4]


@pytest.mark.parametrize("model", ["two_layer", "linear"])
def test_readme_plugin_example(train_here, monkeypatch, model):
    """The README's worked example: a user's own model and data from their own folder, found by an
    absolute search path too (tests/test_docs.py runs the README's own lines)."""
    plugin = REPO / "examples" / "plugin"
    monkeypatch.syspath_prepend(str(plugin))
    run_dir = train_here(f"hydra.searchpath=[file://{plugin / 'conf'}]", "data=xor", f"model={model}",
                         "trainer.max_epochs=2")  # fmt: skip
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    targets = {"two_layer": "my_project.TwoLayerNet", "linear": "my_project.linear_classifier"}
    assert config["model"]["_target_"] == targets[model]
    assert config["loss"]["_target_"] == "torch.nn.CrossEntropyLoss"
    assert "val/acc" in read_scalars(run_dir)


def test_nonfinite_gradient_stops_before_anything_holding_it_is_saved(train_here, tmp_path):
    with pytest.raises(NonFiniteError) as error:
        train_here(*NAN_DATA, "checkpoint.every_n_steps=1")
    message = str(error.value)
    assert message.startswith("non-finite gradient (total norm nan) at optimizer step ")
    assert "before anything after step" in message and "lower the learning rate" in message
    checkpoints = tmp_path / "run" / "checkpoints"
    assert "last.pt" not in {path.name for path in checkpoints.iterdir()}  # resume the last good one
    step = int(message.split("at optimizer step ")[1].split()[0])
    if step > 1:
        saved = torch.load(checkpoints / f"step_{step - 1:08d}.pt")
        assert all(torch.isfinite(t).all() for t in saved["model_state_dict"].values())


def test_skip_mode_skips_bad_steps_and_counts_them(train_here):
    run_dir = train_here(*NAN_DATA, "on_nonfinite=skip")
    scalars = read_scalars(run_dir)
    assert scalars["train/skipped_steps"][-1][1] == 2  # the NaN sample's window, once per epoch
    final = torch.load(run_dir / "checkpoints" / "last.pt")
    assert all(torch.isfinite(t).all() for t in final["model_state_dict"].values())


def test_text_built_in_trains_a_char_rnn(train_here):
    """Also with deterministic algorithms on (runs of one seed being identical is shown by the resume
    tests, which compare separate runs bit for bit)."""
    run_dir = train_here("data=text", "model=char_rnn", "trainer.max_steps=4", "model.hidden=32",
                         "deterministic=true")  # fmt: skip
    scalars = read_scalars(run_dir)
    assert 0 <= scalars["val/acc"][-1][1] <= 1
    assert torch.load(run_dir / "checkpoints" / "last.pt")["label_mapping"][0] == "\n"


def test_speed_settings_and_bf16_are_safe_on_cpu_and_say_so(train_here, caplog):
    train_here(
        "model=cnn", "channels_last=true", "precision=bf16", "trainer.max_steps=2", "data.batch_size=8"
    )
    assert "precision        bf16" in caplog.text  # this CPU has bf16: no fallback, no warning
    assert not [record for record in caplog.records if record.levelname == "WARNING"]
    speed = next(line for line in caplog.text.splitlines() if line.strip().startswith("speed"))
    if not torch.cuda.is_available():  # CUDA-only settings, off on a CPU as by default, are not news
        assert "pinned memory" not in speed and "tf32" not in speed
    assert "channels_last" in speed and "no conv layers" not in speed


def test_checkpoint_has_the_template_keys_and_the_templates_restore_code_works(train_here):
    run_dir = train_here("data=classification", "data.dataset.num_train=64", "data.dataset.num_val=32",
                         "data.batch_size=16", "trainer.max_epochs=3")  # fmt: skip
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu")  # the template's code
    for key in ("model_state_dict", "optimizer_state_dict", "epoch", "best_val", "scheduler_state_dict",
                "scaler_state_dict", "global_step", "batches_done_in_epoch", "micro_batches_done_in_window",
                "rng_states", "config", "label_mapping", "versions"):  # fmt: skip
        assert key in checkpoint, key
    assert checkpoint["epoch"] == 3 and checkpoint["global_step"] == 12
    assert checkpoint["label_mapping"] == ["class_0", "class_1", "class_2", "class_3"]
    assert checkpoint["config"]["optimizer"]["_target_"] == "torch.optim.Adam"
    new_model = mlp([20], 4, hidden=[64])
    new_optimizer = torch.optim.Adam(new_model.parameters(), lr=0.001)
    new_model.load_state_dict(checkpoint["model_state_dict"])
    new_optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["best.pt", "last.pt", "step_00000008.pt", "step_00000012.pt"]


def test_checkpoint_none_writes_nothing(train_here, caplog):
    run_dir = train_here("checkpoint=none", "data=classification", "trainer.max_steps=3")
    assert not (run_dir / "checkpoints").exists()
    assert "checkpoints      none" in caplog.text


def test_validation_at_an_epoch_end_saves_the_next_epoch_position(train_here):
    """best.pt written by a step-cadence validation on an epoch's last step must point at the start
    of the next epoch, so resuming from it continues (and does not replay an empty epoch forever)."""
    common = ("data=classification", "data.dataset.num_train=64", "data.batch_size=16",
              "trainer.val_every_n_steps=4", "trainer.val_every_n_epochs=null")  # fmt: skip
    run_dir = train_here(*common, "trainer.max_steps=8")
    best_path = run_dir / "checkpoints" / "best.pt"
    best = torch.load(best_path)
    assert best["global_step"] in (4, 8)
    assert best["batches_done_in_epoch"] == 0 and best["epoch"] == best["global_step"] // 4

    train_here(*common, f"resume={best_path}", "trainer.max_steps=12", run_dir=run_dir)
    assert torch.load(run_dir / "checkpoints" / "last.pt")["global_step"] == 12


def test_a_finished_run_logs_every_tag(train_here):
    run_dir = train_here(*TINY)
    scalars = read_scalars(run_dir)
    train_tags = {
        "train/loss",
        "train/grad_norm",
        "train/grad_norm_clipped",
        "train/lr",
        "vitals/samples_per_sec",
        *(f"vitals/time/{share}" for share in ("data", "compute", "validation", "runner")),
    }
    assert set(scalars) == train_tags | {"val/loss", "val/acc", "val/loss_best"}
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4]
    assert all(value <= 1.0 + 1e-5 for _, value in scalars["train/grad_norm_clipped"])
    assert all(math.isfinite(value) for _, value in scalars["train/loss"])


def precision_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "runner.training.precision"]


@pytest.mark.parametrize("bf16_works", [True, False])
def test_amp_fallback_names_bf16_exactly_where_bf16_autocast_works(bf16_works, monkeypatch, caplog):
    """On a machine without CUDA, precision=amp falls back to fp32 in one warning line that points to
    precision=bf16 where that runs (this CPU), and says nothing of bf16 where it would fall back too."""
    from runner.training import precision

    monkeypatch.setattr(precision, "bf16_supported", lambda device: bf16_works)
    resolved = precision.resolve_precision("amp", torch.device("cpu"))
    (warning,) = precision_warnings(caplog)
    assert resolved.used == "fp32" and "this run uses fp32" in warning
    if bf16_works:
        assert "precision=bf16" in warning
    else:
        assert "bf16" not in warning
    caplog.clear()  # a bf16 request runs, or falls back itself without pointing to bf16
    assert precision.resolve_precision("bf16", torch.device("cpu")).used == ("bf16" if bf16_works else "fp32")
    assert [line for line in precision_warnings(caplog) if "precision=bf16 gives" in line] == []


def test_the_bf16_an_amp_fallback_suggests_runs_in_bf16_here(train_here, caplog, tmp_path):
    """The suggestion is one that works: where the amp warning names precision=bf16, a run with it
    trains under bf16 autocast, with no fallback."""
    from runner.training.precision import bf16_supported

    train_here(*TINY, "precision=amp", "trainer.max_steps=1")
    (warning,) = precision_warnings(caplog)
    suggested = "precision=bf16" in warning
    assert suggested is bf16_supported(torch.device("cpu"))
    if suggested:
        caplog.clear()
        run_dir = train_here(*TINY, "precision=bf16", "trainer.max_steps=1", run_dir=tmp_path / "bf16")
        assert precision_warnings(caplog) == []
        assert yaml.safe_load((run_dir / "run.yaml").read_text())["runtime"]["precision_used"] == "bf16"
