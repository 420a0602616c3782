"""Issue 32 through the real CLI: every reader's work is bounded by its file's size (shared values in a
checkpoint, YAML aliases in a run's records), a record that cannot be read never overwrites a result
that can, and the files that made tracebacks (job folders named with Unicode digits or bytes that are
not UTF-8, an event file that is not events, a tampered study, runner's resolvers given junk, a
``last.pt`` that is a folder, a forged seed) are answered in one line. Each run has a timeout: a hang
fails the test."""

import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY, job_dir, run_cli, snapshot
from hostile_files import (
    alias_bomb,
    alias_bomb_mapping,
    runner_like_study,
    shared_config_checkpoint,
    tamper_study,
)

from runner.checkpoint.files import atomic_save
from runner.observe.events import tf_record

pytestmark = pytest.mark.slow  # real subprocesses: the command line and its exit are the point

SECONDS = 90  # a hang is 2**40 values walked; a refusal takes start-up time only


def refused(result, says: str) -> None:
    """Exit 2 with runner's one-line error last, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines and lines[-1].startswith("runner: error: ") and says in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def base_checkpoint(finished_run: Path) -> dict:
    return torch.load(finished_run / "checkpoints" / "last.pt", weights_only=True)


def test_a_checkpoint_of_shared_values_is_refused_in_seconds(tmp_path, finished_run):
    """40 levels of ``{"a": x, "b": x}`` in a 40 KB file: eval and resume walked 2**40 values to
    checksum it (the checksum did not even have to match). Now eval refuses it and resume skips it."""
    shared = shared_config_checkpoint(base_checkpoint(finished_run), tmp_path / "shared.pt")
    result = run_cli("eval", f"ckpt={shared}", cwd=tmp_path, timeout=SECONDS)
    refused(result, "more work to check than a file of its size holds (values shared many times over)")

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    for path in (run_dir / "checkpoints").glob("*.pt"):
        shutil.copy2(shared, path)
    before = snapshot(run_dir)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path, timeout=SECONDS)
    refused(result, "no valid checkpoint in")
    assert snapshot(run_dir) == before


def test_yaml_aliases_in_a_runs_records_are_refused_in_seconds(tmp_path, finished_run):
    """Nine levels of ten aliases (1 KB, 10**9 values): report and resume walked them all."""
    sweep = tmp_path / "sweep"
    for number in (0, 1):
        shutil.copytree(finished_run, sweep / str(number))
    (sweep / "0" / ".hydra" / "overrides.yaml").write_text(alias_bomb())
    (sweep / "1" / "run.yaml").write_text(alias_bomb_mapping())
    result = run_cli("report", "sweep", cwd=tmp_path, timeout=SECONDS)
    assert result.returncode == 0, result.stderr
    for damaged in ("0/.hydra/overrides.yaml", "1/run.yaml"):
        assert f"skipping sweep/{damaged}: it holds a YAML alias (*a0)" in result.stderr, result.stderr

    run_dir = sweep / "0"
    before = snapshot(run_dir)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path, timeout=SECONDS)
    refused(result, "holds a YAML alias (*a0), which no record runner or Hydra writes")
    assert snapshot(run_dir) == before


def test_a_continued_sweep_leaves_a_job_whose_record_is_damaged_for_a_look(tmp_path):
    """A finished job whose ``run.yaml`` was damaged got "failed" over its ok ``result.json`` (or hung
    on aliases); now it needs a look, and its result and checkpoints stay."""
    sweep = ("train", "-m", *TINY, "seed=0,2", "hydra.sweep.dir=sweep")
    assert run_cli(*sweep, cwd=tmp_path).returncode == 0
    jobs = [job_dir(tmp_path / "sweep", number) for number in (0, 1)]
    (jobs[0] / "run.yaml").write_text(alias_bomb_mapping())
    (jobs[1] / "run.yaml").write_bytes(b"\xff\xfe not text \x00")
    kept = {job: (snapshot(job / "checkpoints"), (job / "result.json").read_bytes()) for job in jobs}
    again = run_cli(*sweep, cwd=tmp_path, timeout=SECONDS)
    assert again.returncode == 0, again.stderr
    output = again.stdout + again.stderr
    assert "Traceback" not in output
    for job in jobs:
        assert f"needs a look: {job / 'run.yaml'} cannot be read" in output, output
        assert (snapshot(job / "checkpoints"), (job / "result.json").read_bytes()) == kept[job]


def test_report_reads_odd_job_folders_and_event_files_without_a_traceback(tmp_path, finished_run):
    """``<sweep>/²`` (``isdigit()`` is true, ``int()`` fails), a job folder whose name is not UTF-8
    (TensorBoard's reader cannot open it) and an event file of junk records were tracebacks."""
    sweep = tmp_path / "grid"
    shutil.copytree(finished_run, sweep / "000_seed=0")
    shutil.copytree(finished_run, sweep / ("bad" + b"\xff".decode("utf-8", "surrogateescape")))
    (sweep / "000_seed=0" / "events.out.tfevents.1.junk").write_bytes(tf_record(b"\xff\xff\xff\xffjunk"))
    result = run_cli("report", "grid", cwd=tmp_path, timeout=SECONDS)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "events.out.tfevents.1.junk" in result.stderr and "not events" in result.stderr, result.stderr
    unicode_digit = run_cli("report", "grid/²", cwd=tmp_path, timeout=SECONDS)
    refused(unicode_digit, "grid/²")


def test_runners_resolvers_given_junk_are_one_line(tmp_path):
    """Hydra resolves ``hydra.sweep.subdir`` when it launches a job: junk there was a traceback."""
    for value in ("${sweep_job_dir:x}", "${sweep_overrides:1}"):
        result = run_cli("train", "-m", *TINY, "seed=1", f"hydra.sweep.subdir={value}",
                         "hydra.sweep.dir=sweep", cwd=tmp_path, timeout=SECONDS)  # fmt: skip
        refused(result, "hydra.sweep.subdir")
        assert not (tmp_path / "sweep").exists()  # the sweep directory Hydra made for it is gone


def test_resume_refuses_a_last_checkpoint_that_is_a_folder_before_training(tmp_path, finished_run):
    """It trained the whole run, then failed to replace the folder: IsADirectoryError."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "checkpoints" / "last.pt").unlink()
    (run_dir / "checkpoints" / "last.pt").mkdir()
    before = snapshot(run_dir)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path, timeout=SECONDS)
    refused(result, f"{run_dir / 'checkpoints' / 'last.pt'} is not a file")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("seed", [-1, 2**64 + 1])
def test_resume_refuses_a_forged_seed(tmp_path, finished_run, seed):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    for path in (run_dir / "checkpoints").glob("*.pt"):
        checkpoint = torch.load(path, weights_only=True)
        atomic_save({**{k: v for k, v in checkpoint.items() if k != "checksum"}, "seed": seed}, path)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path, timeout=SECONDS)
    refused(result, "no valid checkpoint in")
    assert "seed (" in result.stderr and "not hold what runner saves there" in result.stderr


@pytest.mark.parametrize("how", ["low-above-high", "attr-not-json", "attr-deep"])
def test_a_tampered_study_is_refused_in_one_line(tmp_path, how):
    """A distribution with low above high, user attributes that are not JSON or nested 100,000 deep:
    tracebacks from Optuna's reader."""
    database = runner_like_study(tmp_path / "sweep", "digits_optuna")
    tamper_study(database, how)
    before = snapshot(tmp_path / "sweep")
    result = run_cli("train", "-m", "hparams_search=digits_optuna", *TINY, "hydra.sweep.dir=sweep",
                     cwd=tmp_path, timeout=SECONDS)  # fmt: skip
    refused(result, "cannot be read")
    assert snapshot(tmp_path / "sweep") == before
