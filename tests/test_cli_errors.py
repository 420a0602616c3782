"""Bad input through the real CLI: exit 2, one line naming key, value and what is allowed, no
traceback, and nothing written: not even the run directory Hydra made for the run. Wrong values, keys,
options and places, each with the words its line must hold, are hostile-input cases
(``tests/hostile_inputs/cases.py``'s ``SAYS``, run in the test's process by test_hostile_inputs.py)."""

from pathlib import Path

import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point


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
        (("data=classification", "data.dataset.num_train=4", "data.drop_last=true"),
         "an epoch has no batch: with data.drop_last=true"),
        (("--experimental-rerun", "config.pickle"), "--experimental-rerun: not a flag"),  # it unpickles
    ],
    ids=["unusable-batch", "monitor-not-logged", "callback-monitor", "scheduler-interval", "collate-fn",
         "early-stopping-patience", "drop-last-empties-the-epoch", "rerun-unpickles"],
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
