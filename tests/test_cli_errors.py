"""Bad input through the real CLI: exit 2, one line naming key, value and what is allowed, no
traceback, and nothing written: not even the run directory Hydra made for the run."""

from pathlib import Path

import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("clip=0", "clip=0 is not allowed; clip must be a finite number > 0, or null"),
        ("clip=-1", "clip=-1 is not allowed; clip must be a finite number > 0"),
        ("clip=abc", "clip=abc is not allowed; clip must be a finite number > 0"),
        ("accumulate=0", "accumulate=0 is not allowed; accumulate must be an integer >= 1"),
        ("accumulate=1.5", "accumulate=1.5 is not allowed; accumulate must be an integer >= 1"),
        ("precision=fp8", "precision=fp8 is not allowed; precision must be one of fp32, amp, bf16"),
        ("device=tpu", "device=tpu is not allowed; device must be auto, cpu, cuda, cuda:N or mps"),
        ("device=cuda", "device=cuda is not available: this machine has no CUDA device"),
        ("optimizer.lr=-1", "optimizer.lr=-1 is not allowed; optimizer.lr must be a finite number >= 0"),
        ("data.batch_size=0", "data.batch_size=0 is not allowed; data.batch_size must be an integer >= 1"),
        ("trainer.max_steps=-5", "trainer.max_steps=-5 is not allowed; trainer.max_steps must be an integer"),
        ("foo=1", "foo=1: 'foo' is not a config key; known top-level keys: accumulate, "),
        ("+foo=1", "foo=1: 'foo' is not a config key; known top-level keys: accumulate, "),
        ("optimizer.lr=1e-3,-1", "optimizer.lr=-1 is not allowed"),
        (
            "model._target_=nope.Model",
            "model._target_=nope.Model could not be built (ModuleNotFoundError: No module named 'nope')",
        ),
        (
            "data.dataset._target_=runner.data.no_such_loader",
            "data.dataset._target_=runner.data.no_such_loader could not be built",
        ),
        ("device=cpü", "device=cpü: not a valid override ("),
        ("model.hidden=[64", "model.hidden=[64: not a valid override ("),
        ("optimizer=lion", "optimizer=lion: no such option; optimizer is one of adam, adamw, sgd"),
        (
            "model=../../elsewhere",
            "model=../../elsewhere: no such option; model is one of char_rnn, char_transformer, cnn,",
        ),
        ("model=null", "model=null: model must name one of its options: char_rnn, char_transformer, cnn,"),
        ("hydra/launcher=null", "hydra/launcher=null: a config group takes one of its options, not null; "),
        ("-m seed=1,2 --cfg job", "--cfg and --multirun: give one of them"),
        (
            "trainer.max_step=5",
            "trainer.max_step=5: trainer has no key max_step; did you mean trainer.max_steps? "
            "its keys: max_steps,",
        ),
        ("model.hiden=5", "model.hiden: model has no key hiden; did you mean model.hidden (an argument of "),
        ("~clip", "~clip: clip is one of runner's settings and cannot be deleted; set it instead"),
        ("optimizer.lr=inf", "optimizer.lr=inf is not allowed; optimizer.lr must be a finite number >= 0"),
        ("optimizer.lr=1e400", "optimizer.lr=inf is not allowed"),
        (
            "optimizer.fused=maybe",
            "optimizer.fused=maybe is not allowed; optimizer.fused must be true, false or null",
        ),
        (
            "model.hidden=[0]",
            "model: runner.models.mlp refused input_shape=[1, 8, 8], num_outputs=10, hidden=[0], ",
        ),
        ("model.dropout=-0.1", "dropout=-0.1 is not allowed; dropout must be a number in [0, 1)"),
        (
            "optimizer.betas=[2,3]",
            "optimizer.betas=[2, 3] is not allowed; optimizer.betas must be two numbers in [0, 1)",
        ),
        (
            "optimizer=sgd optimizer.nesterov=true",
            "optimizer: torch.optim.SGD refused lr=0.01, momentum=0.0, ",
        ),
        ("data.dataset.val_fraction=1.5", "val_fraction=1.5 is not allowed; it must be a number in (0, 1)"),
        (
            "device=cuda:99999999999999999999999",
            "is not a device; device must be auto, cpu, cuda, cuda:N or mps",
        ),
    ],
)
def test_bad_value_is_one_clear_line(tmp_path, override, expected):
    if override == "device=cuda":
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    run_dir = tmp_path / "run"
    result = run_cli("train", *override.split(" "), f"hydra.run.dir={run_dir}", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert error_lines == [f"runner: error: {error_lines[0].removeprefix('runner: error: ')}"]
    assert expected in error_lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert sorted(tmp_path.iterdir()) == []  # no run directory, no outputs/


def test_a_refused_run_in_a_folder_that_exists_leaves_it_as_it_was(tmp_path):
    """hydra.run.dir naming a folder of the user's (or a finished run's, rerun with resume=auto)."""
    notes = tmp_path / "mine" / "notes.log"
    notes.parent.mkdir()
    notes.write_text("my notes\n")
    result = run_cli("train", "hydra.run.dir=mine", "model.dropout=1.5", cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "dropout=1.5 is not allowed" in result.stderr
    assert sorted(path.name for path in (tmp_path / "mine").iterdir()) == ["notes.log"]
    assert notes.read_text() == "my notes\n"
    result = run_cli("train", "hydra.run.dir=new/deeper", "model.dropout=1.5", cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and sorted(path.name for path in tmp_path.iterdir()) == ["mine"]

    finished = run_cli("train", "hydra.run.dir=run", "trainer.max_steps=2", cwd=tmp_path, timeout=120)
    assert finished.returncode == 0, finished.stderr
    record = {path.name: path.read_bytes() for path in (tmp_path / "run" / ".hydra").iterdir()}
    for refused in (("model.dropout=0.5",), ("trainer.max_steps=2",)):  # changed math; nothing to train
        result = run_cli("train", "hydra.run.dir=run", "resume=auto", *refused, cwd=tmp_path, timeout=120)
        assert result.returncode in (0, 2) and "Traceback" not in result.stderr, result.stderr
        assert {path.name: path.read_bytes() for path in (tmp_path / "run" / ".hydra").iterdir()} == record


def test_a_refused_run_in_the_default_place_leaves_no_outputs_folder(tmp_path):
    result = run_cli("train", "model._target_=nope.Model", cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "could not be built" in result.stderr
    assert sorted(tmp_path.iterdir()) == []


def test_unknown_command_is_refused(tmp_path):
    result = run_cli("fly", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert "unknown command 'fly'" in result.stderr


def test_cfg_job_prints_the_config_and_writes_nothing(tmp_path):
    result = run_cli("train", "--cfg", "job", "clip=0.5", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "clip: 0.5" in result.stdout
    assert "_target_: runner.data.load_digits" in result.stdout
    assert not (tmp_path / "outputs").exists()


PLUGINS = Path(__file__).parent / "plugins"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("data=classification", "data.dataset._target_=any_model.triples", "~data.dataset.num_features",
             "~data.dataset.num_classes", "~data.dataset.seed", "data.input_shape=[6]", "data.num_outputs=3"),
            "a batch of list of 3 (Tensor[32, 6] float32, Tensor[32] int64, Tensor[32] float32) cannot be "
            "used with loss=CrossEntropyLoss",
        ),
        (("metrics=perplexity", "checkpoint.monitor=val/acc", "checkpoint.mode=max"),
         "checkpoint.monitor=val/acc is not logged by this run; it logs val/loss, val/ppl"),
        (("callbacks=early_stopping", "callbacks.early_stopping.monitor=val/f1"),
         "callbacks.early_stopping.monitor=val/f1 is not logged by this run"),
        (("scheduler=plateau", "scheduler.interval=fortnight"),
         "scheduler.interval=fortnight is not allowed; scheduler.interval must be one of step, epoch"),
        (("+data.collate_fn=3",), "data.collate_fn=3 has no _target_"),
        (("callbacks=early_stopping", "callbacks.early_stopping.patience=0"),
         "callbacks.early_stopping: runner.training.callbacks.EarlyStopping refused monitor=val/loss, "
         "mode=min, patience=0, min_delta=0.0 (ValueError: early stopping takes mode min or max, "
         "patience >= 1"),
        (("callbacks=ema", "callbacks.ema.decay=1.5"),
         "callbacks.ema: runner.training.callbacks.EMA refused decay=1.5, warmup=false, inv_gamma=1.0, "
         "power=null (ValueError: ema takes a decay in (0, 1)"),
        (("data=classification", "data.dataset.num_train=4", "data.drop_last=true"),
         "an epoch has no batch: with data.drop_last=true"),
        (("model=char_rnn",), "the model (CharRNN) and the data do not fit: on the first batch, list of 2 "
         "(Tensor[32, 1, 8, 8] float32, Tensor[32] int64), the model and loss=CrossEntropyLoss failed"),
        (("data.num_outputs=3",), "the first batch has class labels 0..9, but the model has 3 outputs"),
        (("--nope",), "--nope: not a flag; the flags are Hydra's"),
        (("--experimental-rerun", "config.pickle"), "--experimental-rerun: not a flag"),  # it unpickles
    ],
    ids=["unusable-batch", "monitor-not-logged", "callback-monitor", "scheduler-interval", "collate-fn",
         "early-stopping-patience", "ema-decay", "drop-last-empties-the-epoch", "model-data-misfit",
         "labels-out-of-range", "unknown-flag", "rerun-unpickles"],
)  # fmt: skip
def test_a_contract_mistake_is_one_line_and_writes_nothing(tmp_path, overrides, expected):
    run_dir = tmp_path / "run"
    result = run_cli("train", *overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path, timeout=60,
                     env={"PYTHONPATH": str(PLUGINS)})  # fmt: skip
    assert result.returncode == 2, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1 and expected in error_lines[0], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("place", "expected"),
    [
        ("dangling-outputs", "cannot write outputs: it is a link to "),
        ("hydra.run.dir=/proc/runner_test", "cannot write /proc/runner_test: No such file or directory"),
        ("hydra.run.dir=/etc/passwd/run", "cannot write /etc/passwd/run: Not a directory"),
    ],
)
def test_a_place_runner_cannot_write_is_one_line(tmp_path, place, expected):
    overrides = [place] if "=" in place else []
    if place == "dangling-outputs":
        (tmp_path / "outputs").symlink_to(tmp_path / "gone")
    result = run_cli("train", *overrides, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1 and expected in error_lines[0], result.stderr
    assert "hydra.run.dir=DIR" in error_lines[0]
