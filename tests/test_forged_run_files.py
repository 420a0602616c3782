"""A run's files forged, through the real CLI: what a refusal's line alone does not show (the value of
an environment variable a checkpoint's config names is never printed; a continued sweep continues a job
whose result is nested too deeply). The other forgeries (options a record places among Hydra's own
settings, live interpolations, files nested too deeply, checkpoints whose keys hold what runner never
saves there, results, event files and locks that are not plain files) are hostile-input cases
(``tests/hostile_inputs/cases.py``, run by test_hostile_inputs.py), each refused in one line or
skipped, never a hang, a traceback or code run."""

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY, job_dir, run_cli

from runner.checkpoint.files import atomic_save

pytestmark = pytest.mark.slow  # real subprocesses: the command line and its exit are the point


def refused(result, says: str) -> None:
    """Exit 2 with runner's one-line error last (a resume may warn first of checkpoints it skipped)."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines and lines[-1].startswith("runner: error: ") and says in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def forged(finished_run: Path, path: Path, change) -> Path:
    """The run's ``last.pt`` changed by ``change``, saved with a valid checksum (whoever changed it can
    compute one)."""
    checkpoint = copy.deepcopy(torch.load(finished_run / "checkpoints" / "last.pt", weights_only=True))
    change(checkpoint)
    atomic_save(checkpoint, path)
    return path


@pytest.mark.parametrize(
    "name, change",
    [
        ("environment", lambda model, marker: model.update(hidden="${oc.env:RUNNER_TEST_SECRET}")),
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


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda c: c.update(config="x"), "no valid checkpoint in"),
    ],
    ids=["config-as-text"],
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


def test_a_continued_sweep_takes_a_result_nested_too_deeply_as_no_result(tmp_path):
    """It failed the job with a RecursionError; now the job is continued from its checkpoint."""
    sweep = ("train", "-m", *TINY, "seed=0,2", "hydra.sweep.dir=sweep")
    assert run_cli(*sweep, cwd=tmp_path).returncode == 0
    result = job_dir(tmp_path / "sweep", 0) / "result.json"
    result.write_text("[" * 100000 + "]" * 100000)
    again = run_cli(*sweep, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(result.read_text())["status"] == "ok"
