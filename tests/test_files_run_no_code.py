"""No file runs code, through the real CLI: an escaped interpolation in a checkpoint (``eval``) or in a
run directory's record (``train resume=<dir>``, ``resume=latest``), and pickled sampler state in a
study's database (a continued Optuna search). Each payload would create a marker file."""

import json
import pickle
import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest
import torch
from conftest import TINY, job_dir, run_cli, snapshot

from runner.checkpoint.files import atomic_save

pytestmark = pytest.mark.slow  # real subprocesses: the command line and its exit are the point

ESCAPED = "\\${oc.create:{_target_: pathlib.Path.touch, self: %s}}"  # as the file holds it
SEARCH = ("hparams_search=digits_optuna", *TINY, "hydra.sweep.dir=sweep")
STUDY = "digits_optuna"


def refused_in_one_line(result, says: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("runner: error: ") and says in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_eval_refuses_an_escaped_interpolation_in_a_checkpoint(tmp_path, finished_run):
    """With it in ``loss.weight``, eval used to run the payload and print normal metrics."""
    marker = tmp_path / "code-ran"
    checkpoint = torch.load(finished_run / "checkpoints" / "last.pt", weights_only=True)
    checkpoint["config"]["loss"]["weight"] = ESCAPED % marker
    evil = tmp_path / "evil.pt"
    atomic_save(checkpoint, evil)  # with a valid checksum: whoever changed it can compute one
    result = run_cli("eval", f"ckpt={evil}", cwd=tmp_path)
    refused_in_one_line(result, f"checkpoint {evil} holds loss.weight=${{oc.create:")
    assert "which is still an interpolation once resolved" in result.stderr
    assert not marker.exists()


def test_resume_refuses_an_escaped_interpolation_in_a_list_of_the_run_record(tmp_path, finished_run):
    """A callback runner ships, with the payload inside a list value: ``resume=<dir>`` and
    ``resume=latest`` refuse it, leave the run directory as it was and run nothing."""
    marker = tmp_path / "code-ran"
    run_dir = tmp_path / "outputs" / "2026-01-01" / "00-00-00-beef"
    shutil.copytree(finished_run, run_dir)
    record = run_dir / ".hydra" / "overrides.yaml"
    record.write_text(
        record.read_text() + "- +callbacks.evil._target_=runner.training.callbacks.EMA\n"
        f"- \"+callbacks.evil.decay=['\\{ESCAPED % marker}']\"\n"
    )
    before = snapshot(run_dir)
    for resume in (str(run_dir), "latest"):
        result = run_cli("train", f"resume={resume}", "trainer.max_steps=8", cwd=tmp_path)
        refused_in_one_line(result, f"{run_dir / '.hydra'} holds callbacks.evil.decay.0=${{oc.create:")
        assert snapshot(run_dir) == before and not marker.exists()


def forge_checkpoints(folder: Path, marker: Path) -> None:
    """Every checkpoint under ``folder``, its stored config holding the payload in ``metrics`` (a
    setting a resumed run may change)."""
    for path in folder.rglob("*.pt"):
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["config"]["metrics"]["acc"]["extra"] = ESCAPED % marker
        atomic_save(checkpoint, path)


def test_resume_auto_and_a_continued_sweep_build_only_the_command_lines_config(tmp_path, finished_run):
    """They read a checkpoint's stored config only to compare it with the command line's, which is
    what they build: a payload there runs nothing (an interrupted sweep job whose checkpoint holds
    other settings is refused in one line)."""
    marker = tmp_path / "code-ran"
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    forge_checkpoints(run_dir, marker)
    resumed = run_cli(
        "train", *TINY, "trainer.max_steps=6", "resume=auto", f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from     " in resumed.stdout and not marker.exists()

    sweep = ("train", "-m", *TINY, "seed=1,2", "hydra.sweep.dir=sweep")
    assert run_cli(*sweep, cwd=tmp_path).returncode == 0
    (job_dir(tmp_path / "sweep", 1) / "result.json").unlink()  # as if stopped before it ended
    forge_checkpoints(job_dir(tmp_path / "sweep", 1), marker)
    again = run_cli(*sweep, cwd=tmp_path)
    refused_in_one_line(again, "holds a run of other settings (metrics.acc.extra (")
    assert not marker.exists()


class TouchOnUnpickle:
    """Pickles as a call to ``Path.touch(marker)``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.path,))


def pickled_cma_state(marker: Path) -> str:
    """What CmaEsSampler stores as ``cma:optimizer:0`` and unpickles: here, a call that makes the marker."""
    return pickle.dumps(TouchOnUnpickle(marker)).hex()


def test_a_forged_trial_in_a_study_is_refused_before_any_sampler_reads_it(tmp_path):
    """The issue's payload: a finished trial runner did not write, holding pickled CMA-ES state."""
    marker = tmp_path / "code-ran"
    (tmp_path / "sweep").mkdir()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'sweep' / 'optuna.db'}", study_name=STUDY)
    lr = optuna.distributions.FloatDistribution(1e-4, 3e-2, log=True)
    system_attrs = {"cma:optimizer:0": pickled_cma_state(marker), "cma:generation": 0}
    forged = optuna.trial.create_trial(
        params={"optimizer.lr": 1e-3},
        distributions={"optimizer.lr": lr},
        value=0.5,
        system_attrs=system_attrs,
    )
    study.add_trial(forged)
    before = snapshot(tmp_path / "sweep")
    for sampler in ("cmaes", "tpe"):
        result = run_cli("train", "-m", *SEARCH, f"hydra/sweeper/sampler={sampler}", cwd=tmp_path)
        refused_in_one_line(result, "holds trial 0, which runner did not write")
        assert snapshot(tmp_path / "sweep") == before and not marker.exists()


def test_a_continued_search_never_unpickles_sampler_state_from_its_study(tmp_path):
    """runner's own trial, its pickled CMA-ES state swapped in the database: ``cmaes`` is refused in
    one line (it would load that pickle), and the search continues with a sampler that never does."""
    marker = tmp_path / "code-ran"
    first = run_cli("train", "-m", *SEARCH, "hydra.sweeper.n_trials=1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(tmp_path / "sweep" / "optuna.db") as database:  # as an attacker edits it
        database.execute(
            "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (1, ?, ?)",
            ("cma:optimizer:0", json.dumps(pickled_cma_state(marker))),
        )
    before = snapshot(tmp_path / "sweep")
    refused = run_cli("train", "-m", *SEARCH, "hydra.sweeper.n_trials=2", "hydra/sweeper/sampler=cmaes",
                      cwd=tmp_path)  # fmt: skip
    refused_in_one_line(refused, "hydra.sweeper.sampler: Optuna's CmaEsSampler keeps its state as a pickle")
    assert snapshot(tmp_path / "sweep") == before and not marker.exists()
    continued = run_cli("train", "-m", *SEARCH, "hydra.sweeper.n_trials=2", cwd=tmp_path)
    assert continued.returncode == 0, continued.stderr
    assert "continuing: 1 done before" in continued.stdout + continued.stderr
    assert (job_dir(tmp_path / "sweep", 1) / "result.json").is_file() and not marker.exists()
