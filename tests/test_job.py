"""The job lifecycle (``runner.experiment.job``), driven in-process as ``python -m runner train`` drives
it once Hydra has composed and made the run directory: the real composed config, the real engine, and
what Hydra writes before a task (its record, an empty log) made by hand."""

import json
import logging
import math
import signal
from pathlib import Path

import pytest
from conftest import PLUGINS, TINY
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from runner.checkpoint.locate import locate_checkpoint
from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.config.errors import ConfigError
from runner.experiment.job import run_job
from runner.experiment.job_facts import Invocation, Job
from runner.experiment.sweep_stop import SweepStop
from runner.experiment.undo import RunDirBefore
from runner.observe.records import recorded_result
from runner.search.continuation import OtherJobInTheWay
from runner.training.signals import stop_before_start


@pytest.fixture(autouse=True)
def _plugins_and_log(monkeypatch, caplog):
    monkeypatch.syspath_prepend(str(PLUGINS))
    caplog.set_level(logging.INFO, logger="runner")


def composed_cfg(*overrides: str):
    """The config as Hydra composes it for the task, before runner types it."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=[*TINY, *overrides])


def hydra_writes(run_dir: Path, overrides: str = "[]") -> None:
    """What Hydra writes into a run directory before the task starts: its record and an empty log."""
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "hydra.yaml"):
        (run_dir / ".hydra" / name).write_text("{}\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text(overrides + "\n")
    (run_dir / "train.log").touch()


def sweep_job(sweep_dir: Path, number: int, *overrides: str, **facts) -> Job:
    """Job ``number`` of a sweep whose jobs run one after another in this process (Hydra's basic
    launcher); ``overrides``: its task overrides."""
    return Job(sweep_dir / str(number), in_sweep=True, number=number, overrides=list(overrides),
               sweep_dir=sweep_dir, jobs_in_this_process=True, **facts)  # fmt: skip


def test_a_run_records_ok_and_returns_its_best(tmp_path):
    run_dir = tmp_path / "run"
    hydra_writes(run_dir)
    best = run_job(composed_cfg(), Job(run_dir), Invocation(), build=instantiate)
    result = recorded_result(run_dir)
    assert math.isfinite(best) and result["status"] == "ok" and result["best"] == best
    assert (run_dir / "checkpoints").is_dir()
    # Which metric best is of, where the run reached it, and the last validation's metrics.
    assert result["monitor"] == "val/loss" and 1 <= result["best_step"] <= result["step"]
    assert set(result["final"]) == {"val/loss", "val/acc"} and result["final"]["val/loss"] >= best


def test_a_refused_run_raises_and_leaves_no_run_directory(tmp_path, monkeypatch):
    """The refusal reaches the command line (one line, exit 2); the folders Hydra made are gone."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "outputs" / "2026-12-04" / "16-00-00"
    hydra_writes(run_dir)
    with pytest.raises(ConfigError, match=r"optimizer\.lr"):
        run_job(composed_cfg("optimizer.lr=-1"), Job(run_dir), Invocation(), build=instantiate)
    assert list(tmp_path.iterdir()) == []


def test_a_new_run_into_a_run_directory_is_refused_and_the_run_kept_as_it_was(tmp_path):
    """A config file naming an existing run's directory: refused, and the record Hydra rewrote
    before the task started is given back."""
    run_dir = tmp_path / "run"
    hydra_writes(run_dir, "[seed=1]")
    run_job(composed_cfg("seed=1"), Job(run_dir), Invocation(), build=instantiate)
    files = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
    before = RunDirBefore.of(run_dir)
    hydra_writes(run_dir, "[seed=2]")  # Hydra's record of the new invocation
    with pytest.raises(ConfigError, match="already holds a run"):
        run_job(composed_cfg("seed=2"), Job(run_dir), Invocation(before=before), build=instantiate)
    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == files


def test_a_resume_with_nothing_left_to_train_says_so_and_leaves_the_run_as_it_was(tmp_path, capsys):
    """Not an error: one line, nothing trained or written, Hydra's new record of the resume taken back."""
    run_dir = tmp_path / "run"
    hydra_writes(run_dir)
    run_job(composed_cfg(), Job(run_dir), Invocation(), build=instantiate)
    files = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
    before = RunDirBefore.of(run_dir)
    found = locate_checkpoint(str(run_dir), tmp_path)
    hydra_writes(run_dir, f"[resume={found.path}]")
    given = Invocation(found=found, before=before)
    assert run_job(composed_cfg(f"resume={found.path}"), Job(run_dir), given, build=instantiate) is None
    assert capsys.readouterr().err.startswith("runner: ")
    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == files


def test_a_failed_sweep_job_records_its_failure_and_returns_nan(tmp_path, caplog):
    """The sweep goes on: the job's error is in result.json and in one console line naming its log
    file (Hydra's file handler, added here as Hydra adds it), which alone gets the traceback."""
    job = sweep_job(tmp_path / "sweep", 0, "seed=1")
    hydra_writes(job.run_dir)
    log_file = logging.FileHandler(job.run_dir / "train.log")
    logging.getLogger().addHandler(log_file)
    cfg = composed_cfg("+callbacks.fails._target_=failing_callback.FailsAtStep")
    try:
        ended = run_job(cfg, job, Invocation(sweep_stop=SweepStop(["seed"])), build=instantiate)
    finally:
        logging.getLogger().removeHandler(log_file)
        log_file.close()
    assert math.isnan(ended)
    result = recorded_result(job.run_dir)
    assert result["status"] == "failed"
    assert result["error"] == "RuntimeError: a bug in the user's callback at step 2"
    assert "Traceback" in (job.run_dir / "train.log").read_text()
    console = [r.getMessage() for r in caplog.records]
    assert "job failed" not in console
    end = [message for message in console if message.startswith("failed in")]
    assert len(end) == 1 and end[0].endswith(f"(traceback in {job.run_dir / 'train.log'})")


def test_a_refused_sweep_job_records_why_and_the_sweep_goes_on(tmp_path):
    job = sweep_job(tmp_path / "sweep", 1, "optimizer.lr=-1")
    hydra_writes(job.run_dir)
    assert math.isnan(run_job(composed_cfg("optimizer.lr=-1"), job, Invocation(), build=instantiate))
    result = recorded_result(job.run_dir)
    assert result["status"] == "failed" and "optimizer.lr" in result["error"]


def test_a_single_run_that_raises_records_its_failure_and_raises_on(tmp_path):
    run_dir = tmp_path / "run"
    hydra_writes(run_dir)
    cfg = composed_cfg("+callbacks.fails._target_=failing_callback.FailsAtStep")
    with pytest.raises(RuntimeError, match="a bug in the user's callback"):
        run_job(cfg, Job(run_dir), Invocation(), build=instantiate)
    assert recorded_result(run_dir)["status"] == "failed"


def test_a_job_an_earlier_run_of_its_sweep_finished_is_not_run_again(tmp_path, caplog):
    """Run again with the same sweep directory: its recorded best, its files untouched, Hydra's new
    record of it taken back."""
    job = sweep_job(tmp_path / "sweep", 0, "seed=1")
    hydra_writes(job.run_dir, "[seed=1]")
    best = run_job(composed_cfg("seed=1"), job, Invocation(), build=instantiate)
    files = {path: path.read_bytes() for path in job.run_dir.rglob("*") if path.is_file()}
    before_jobs = {job.run_dir.resolve(): RunDirBefore.of(job.run_dir)}
    hydra_writes(job.run_dir, "[seed=1, again]")
    caplog.clear()
    again = run_job(composed_cfg("seed=1"), job, Invocation(before_jobs=before_jobs), build=instantiate)
    assert again == best
    assert {path: path.read_bytes() for path in job.run_dir.rglob("*") if path.is_file()} == files
    assert not any(r.getMessage().startswith("started") for r in caplog.records)


def test_a_job_directory_holding_a_run_of_other_settings_is_refused_untouched(tmp_path):
    job = sweep_job(tmp_path / "sweep", 0, "seed=1")
    hydra_writes(job.run_dir)
    run_job(composed_cfg("seed=1"), job, Invocation(), build=instantiate)
    files = {path: path.read_bytes() for path in job.run_dir.rglob("*") if path.is_file()}
    with pytest.raises(OtherJobInTheWay, match=r"seed \(1 there, 2 now\)"):
        run_job(composed_cfg("seed=2"), job, Invocation(), build=instantiate)
    assert {path: path.read_bytes() for path in job.run_dir.rglob("*") if path.is_file()} == files


def test_a_job_after_the_sweep_was_stopped_is_not_run_and_the_stop_names_it(tmp_path):
    stop = SweepStop(["seed"], signal_number=signal.SIGTERM)
    job = sweep_job(tmp_path / "sweep", 3, "seed=5", "trainer.max_steps=4")
    hydra_writes(job.run_dir)
    assert math.isnan(run_job(composed_cfg("seed=5"), job, Invocation(sweep_stop=stop), build=instantiate))
    assert not job.run_dir.exists() and stop.not_run == ["3 (seed=5)"]


def test_a_stopped_job_saves_and_the_same_sweep_run_again_continues_it(tmp_path, caplog):
    """A stop signal while the job starts (the sweep's handler took it): the job stops at its first
    step with a checkpoint, ends as stopped; the sweep run again continues it from that step."""
    job = sweep_job(tmp_path / "sweep", 0, "seed=1")
    hydra_writes(job.run_dir, "[seed=1]")
    stop = SweepStop(["seed"])
    stop_before_start(signal.SIGTERM)
    try:
        ended = run_job(composed_cfg("seed=1"), job, Invocation(sweep_stop=stop), build=instantiate)
    finally:
        stop.unwatch()
    assert math.isnan(ended)
    assert stop.signal_number == signal.SIGTERM and stop.stopped_a_job
    assert any(r.getMessage().startswith("stopped in") for r in caplog.records)
    assert list((job.run_dir / "checkpoints").glob("*.pt"))
    assert recorded_result(job.run_dir) == {}  # stopped is not an outcome: the job is to continue

    caplog.clear()
    best = run_job(composed_cfg("seed=1"), job, Invocation(sweep_stop=SweepStop(["seed"])), build=instantiate)
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("started")]
    assert started == ["started: seed=1 (continuing from step 1)"]
    assert recorded_result(job.run_dir)["status"] == "ok" and math.isfinite(best)


def test_a_search_job_records_its_objectives(tmp_path):
    job = sweep_job(tmp_path / "sweep", 0, "seed=1", runner_search=True,
                    sweeper={"objectives": ["val/loss", "val/acc"]})  # fmt: skip
    hydra_writes(job.run_dir)
    best = run_job(composed_cfg("seed=1"), job, Invocation(), build=instantiate)
    result = json.loads((job.run_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["objectives"]["val/loss"] == best
    assert 0 <= result["objectives"]["val/acc"] <= 1
