"""A run's files forged, through the real CLI: an option a run directory's record places among Hydra's
own settings (Hydra builds ``hydra.callbacks`` before runner checks the config), a live interpolation in a
record or in a checkpoint's config (a resolver reads this machine's environment; values that name each
other grow without bound), files nested too deeply, checkpoints whose keys hold what runner never saves
there, and a result, event file or lock that is not a plain file or not one runner writes. Each is
refused in one line or skipped, never a hang or a traceback; each payload that would run code creates a
marker file (``tests/test_files_run_no_code.py`` holds the escaped interpolations and pickles)."""

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY, job_dir, run_cli, snapshot

from runner.checkpoint.files import atomic_save

pytestmark = pytest.mark.slow  # real subprocesses: the command line and its exit are the point

LIVE_CREATE = "${oc.create:{_target_: pathlib.Path.touch, self: %s}}"
# Eight names of eight values, eleven deep: 8**11 values once resolved.
BOMB = {"z0": [1] * 8, **{f"z{i}": [f"${{model.z{i - 1}}}"] * 8 for i in range(1, 12)}}


def refused(result, says: str) -> None:
    """Exit 2 with runner's one-line error last (a resume may warn first of checkpoints it skipped)."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines and lines[-1].startswith("runner: error: ") and says in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def run_with_record(finished_run: Path, run_dir: Path, lines: list[str]) -> Path:
    """A copy of the run whose ``.hydra/overrides.yaml`` also holds ``lines``."""
    shutil.copytree(finished_run, run_dir)
    record = run_dir / ".hydra" / "overrides.yaml"
    record.write_text(record.read_text() + "".join(f"- {json.dumps(line)}\n" for line in lines))
    return run_dir


def forged(finished_run: Path, path: Path, change, deep: bool = False) -> Path:
    """The run's ``last.pt`` changed by ``change``, saved with a valid checksum (whoever changed it can
    compute one; ``deep``: with Python's recursion limit raised, as they can)."""
    checkpoint = copy.deepcopy(torch.load(finished_run / "checkpoints" / "last.pt", weights_only=True))
    change(checkpoint)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000 if deep else limit)
    try:
        atomic_save(checkpoint, path)
    finally:
        sys.setrecursionlimit(limit)
    return path


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_config(checkpoint: dict) -> None:
    checkpoint["config"]["model"]["extra"] = nested(3000)


@pytest.mark.parametrize("package", ["hydra.callbacks.evil", "_global_.hydra.callbacks.evil"])
def test_resume_refuses_a_record_that_puts_an_option_among_hydras_settings(tmp_path, finished_run, package):
    """``+scheduler@hydra.callbacks.evil=onecycle`` made Hydra build OneCycleLR as one of its own
    callbacks, its ``max_lr`` an ``${oc.create:...}`` through ``optimizer.lr``: the marker was created
    before runner's check of the config ran."""
    marker = tmp_path / "code-ran"
    run_dir = tmp_path / "outputs" / "2026-01-01" / "00-00-00-beef"
    lines = [f"+scheduler@{package}=onecycle", "+total_steps=1", f"optimizer.lr='{LIVE_CREATE % marker}'"]
    run_with_record(finished_run, run_dir, lines)
    before = snapshot(run_dir)
    for resume in (str(run_dir), "latest"):
        result = run_cli("train", f"resume={resume}", "trainer.max_steps=8", cwd=tmp_path)
        refused(result, f"holds +scheduler@{package}=onecycle, which runner does not re-apply")
        assert snapshot(run_dir) == before and not marker.exists()


def test_resume_refuses_a_record_that_replaces_hydras_logging(tmp_path, finished_run):
    """``+callbacks@hydra.job_logging=ema`` was re-applied: the resumed run logged as the record said."""
    run_dir = run_with_record(finished_run, tmp_path / "run", ["+callbacks@hydra.job_logging=ema"])
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path)
    refused(result, "holds +callbacks@hydra.job_logging=ema, which runner does not re-apply")


def test_resume_refuses_a_live_interpolation_in_the_record(tmp_path, finished_run):
    """The record's ``${oc.env:...}`` took this machine's environment as a setting of the resumed run."""
    line = "optimizer.lr=${oc.env:RUNNER_TEST_LR}"
    run_dir = run_with_record(finished_run, tmp_path / "run", [line])
    before = snapshot(run_dir)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path,
                     env={"RUNNER_TEST_LR": "0.01"})  # fmt: skip
    refused(result, f"holds {line}, an interpolation, which runner does not resolve from a run directory")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize(
    "name, change",
    [
        ("environment", lambda model, marker: model.update(hidden="${oc.env:RUNNER_TEST_SECRET}")),
        ("growing", lambda model, marker: model.update(BOMB)),
        ("oc.create", lambda model, marker: model.update(extra=[LIVE_CREATE % marker])),
    ],
)
def test_eval_refuses_a_live_interpolation_before_resolving_it(tmp_path, finished_run, name, change):
    """A checkpoint's config is saved resolved: one with an interpolation was edited. Resolving it
    printed an environment variable's value in the error, or never ended (8**11 values)."""
    marker = tmp_path / "code-ran"
    path = forged(finished_run, tmp_path / "evil.pt", lambda c: change(c["config"]["model"], marker))
    result = run_cli("eval", f"ckpt={path}", cwd=tmp_path, env={"RUNNER_TEST_SECRET": "s3cr3t"}, timeout=90)
    refused(result, f"checkpoint {path} holds model.")
    assert "an interpolation; runner saves a run's config resolved" in result.stderr
    assert "s3cr3t" not in result.stderr and not marker.exists()


def test_a_checkpoint_nested_too_deeply_is_corrupted_and_resume_takes_the_one_before(tmp_path, finished_run):
    """Its checksum recursed past Python's limit: a RecursionError traceback, no fallback."""
    deep = forged(finished_run, tmp_path / "deep.pt", deep_config, deep=True)
    result = run_cli("eval", f"ckpt={deep}", cwd=tmp_path)
    refused(result, "its contents are nested too deeply for a runner checkpoint")

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    shutil.copy2(deep, run_dir / "checkpoints" / "last.pt")
    resumed = run_cli("train", f"resume={run_dir}", "trainer.max_steps=6", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "skipping checkpoint" in resumed.stderr and "nested too deeply" in resumed.stderr


def test_a_run_record_nested_too_deeply_is_damaged(tmp_path, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / ".hydra" / "overrides.yaml").write_text("[" * 5000 + "]" * 5000 + "\n")
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path)
    refused(
        result, "cannot be read (it is nested too deeply, more than 100 levels); the run directory is damaged"
    )


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda c: c.update(global_step="9"), "no valid checkpoint in"),
        (lambda c: c.update(config="x"), "no valid checkpoint in"),
        (lambda c: c.update(rng_states={"torch": "x"}), "its random states are not ones runner saves"),
        (lambda c: c.update(config={}), "these settings differ from the run being resumed"),
    ],
    ids=["step-as-text", "config-as-text", "random-states", "config-empty"],
)
def test_a_checkpoint_whose_keys_hold_something_else_is_refused_in_one_line(
    tmp_path, finished_run, change, says
):
    """Each was a TypeError or KeyError traceback half-way through the resume."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    for path in (run_dir / "checkpoints").glob("*.pt"):
        forged(finished_run, path, change)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path)
    refused(result, says)


def test_report_skips_what_is_not_a_plain_file(tmp_path, finished_run):
    """A ``result.json`` that is a FIFO hung ``report`` (and a continued sweep) forever; an event file
    linked to ``/dev/zero`` was read until the kernel killed report."""
    job = tmp_path / "sweep" / "0"
    shutil.copytree(finished_run, job)
    (job / "result.json").unlink()
    os.mkfifo(job / "result.json")
    (job / "events.out.tfevents.9.zero").symlink_to("/dev/zero")
    result = run_cli("report", "sweep", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    for name in ("result.json", "events.out.tfevents.9.zero"):
        assert f"skipping sweep/0/{name}: it is not a plain file" in result.stderr
    assert "| 0 |" in (tmp_path / "sweep" / "summary.md").read_text()


def test_a_continued_sweep_takes_a_result_nested_too_deeply_as_no_result(tmp_path):
    """It failed the job with a RecursionError; now the job is continued from its checkpoint."""
    sweep = ("train", "-m", *TINY, "seed=0,2", "hydra.sweep.dir=sweep")
    assert run_cli(*sweep, cwd=tmp_path).returncode == 0
    result = job_dir(tmp_path / "sweep", 0) / "result.json"
    result.write_text("[" * 100000 + "]" * 100000)
    again = run_cli(*sweep, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(result.read_text())["status"] == "ok"


@pytest.mark.parametrize("kind", ["deep-json", "fifo"])
def test_a_lock_file_that_is_not_one_runner_writes_is_named_in_one_line(tmp_path, finished_run, kind):
    """A ``.lock`` of JSON nested thousands deep was a RecursionError traceback; a FIFO hung the resume."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    if kind == "fifo":
        os.mkfifo(run_dir / ".lock")
    else:
        (run_dir / ".lock").write_text("[" * 100000 + "]" * 100000)
    result = run_cli("train", f"resume={run_dir}", "trainer.max_steps=8", cwd=tmp_path, timeout=60)
    refused(result, f"{run_dir} is locked by {run_dir / '.lock'}, which cannot be read")
