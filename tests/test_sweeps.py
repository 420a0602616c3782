"""Sweeps with Hydra multirun and the real plugins, and their summaries."""

import csv
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from conftest import REPO, read_scalars, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

TINY = (
    "data=classification", "data.dataset.num_train=64", "data.dataset.num_val=32", "data.batch_size=16",
    "trainer.max_steps=6", "trainer.val_every_n_steps=2",
)  # fmt: skip


def sweep_dir(cwd):
    (found,) = (cwd / "outputs" / "multirun").glob("*/*")
    return found


def summary_rows(directory):
    with open(directory / "summary.csv") as handle:
        return list(csv.DictReader(handle))


def hparams_of_run(run_dir):
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    content = accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
            for name, value in info.hparams.items()}  # fmt: skip


def test_grid_sweep_summarises_itself(tmp_path):
    result = run_cli("train", "-m", "optimizer.lr=0.001,0.01", "seed=0,1", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    directory = sweep_dir(tmp_path)
    rows = summary_rows(directory)
    assert len(rows) == 4
    best_values = [float(row["best_val_loss"]) for row in rows]
    assert best_values == sorted(best_values)  # best first
    assert {(row["optimizer.lr"], row["seed"]) for row in rows} == {
        (lr, seed) for lr in ("0.001", "0.01") for seed in ("0", "1")
    }
    assert all(row["status"] == "ok" and row["steps"] == "6" for row in rows)
    assert (directory / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        "| job | status | optimizer.lr | seed | best val/loss (min) |"
        in (directory / "summary.md").read_text()
    )
    for job in range(4):
        job_dir = directory / str(job)
        assert (job_dir / "checkpoints" / "last.pt").exists()
        scalars = read_scalars(job_dir)
        assert float(rows[[r["job"] for r in rows].index(str(job))]["best_val_loss"]) == pytest.approx(
            min(value for _, value in scalars["val/loss"]), rel=1e-3
        )
        hparams = hparams_of_run(job_dir)
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
        assert f"optimizer.lr={hparams['optimizer.lr']:g}" in overrides
        assert f"seed={hparams['seed']:g}" in overrides
        # The hparams live in the job's own run, not in a stray sub-run.
        assert not [path for path in job_dir.iterdir() if path.is_dir() and any(path.glob("events.*"))]


def test_joblib_launcher_runs_jobs_in_parallel_processes(tmp_path):
    result = run_cli("train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                     "optimizer.lr=0.001,0.01", *TINY, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = summary_rows(sweep_dir(tmp_path))
    assert sorted(row["optimizer.lr"] for row in rows) == ["0.001", "0.01"]
    assert all(row["status"] == "ok" for row in rows)


def test_optuna_search_reports_its_best_trial(tmp_path):
    result = run_cli(
        "train", "-m", "hparams_search=digits_optuna", "hydra.sweeper.n_trials=4", *TINY,
        f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    directory = sweep_dir(tmp_path)
    optuna_best = yaml.safe_load((directory / "optimization_results.yaml").read_text())
    rows = summary_rows(directory)
    assert len(rows) == 4
    assert float(rows[0]["best_val_loss"]) == pytest.approx(optuna_best["best_value"], rel=1e-3)
    assert float(rows[0]["optimizer.lr"]) == pytest.approx(
        optuna_best["best_params"]["optimizer.lr"], rel=1e-3
    )

    # The study is persistent: running again continues it.
    again = run_cli(
        "train", "-m", "hparams_search=digits_optuna", "hydra.sweeper.n_trials=1",
        "hydra.sweeper.sampler.seed=1", *TINY, f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
        cwd=tmp_path / "outputs",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    study = optuna.load_study(study_name="digits_optuna", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len(study.trials) == 5


def test_a_failing_job_does_not_stop_the_others(tmp_path):
    plugins = str(REPO / "tests" / "plugins")
    result = run_cli(
        "train", "-m", *TINY, "data.dataset._target_=slow_data.failing_classification",
        "+data.dataset.fail=false,true,false", cwd=tmp_path,
        env={"PYTHONPATH": plugins + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert result.returncode == 1
    assert "1 of 3 jobs failed (jobs 1)" in result.stdout + result.stderr
    directory = sweep_dir(tmp_path)
    rows = {row["job"]: row for row in summary_rows(directory)}
    assert rows["1"]["status"] == "failed" and rows["1"]["best_val_loss"] == ""
    assert rows["0"]["status"] == rows["2"]["status"] == "ok"
    log = (directory / "1" / "train.log").read_text()
    assert "Traceback" in log and "deliberate failure for the test" in log


def test_report_rebuilds_the_summary_of_an_interrupted_sweep(tmp_path):
    result = run_cli("train", "-m", "optimizer.lr=0.001,0.01", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    directory = sweep_dir(tmp_path)
    for name in ("summary.csv", "summary.md", "summary.png"):
        (directory / name).unlink()
    (directory / "1" / "result.json").unlink()  # as if job 1 had been killed
    report = run_cli("report", str(directory), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    rows = {row["job"]: row for row in summary_rows(directory)}
    assert rows["1"]["status"] == "incomplete" and rows["1"]["steps"] == "6"
    assert rows["0"]["status"] == "ok"
    assert (directory / "summary.png").exists()
    assert "| job | status | optimizer.lr |" in report.stdout

    single = run_cli("report", str(directory / "0"), cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    assert len(summary_rows(directory / "0")) == 1


def test_sweeps_started_together_get_their_own_directories(tmp_path):
    command = [sys.executable, "-m", "runner", "train", "-m", "seed=0", *TINY]
    processes = [
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for process in processes:
        _, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
    sweeps = list((tmp_path / "outputs" / "multirun").glob("*/*"))
    assert len(sweeps) == 2
    for directory in sweeps:
        assert len(summary_rows(directory)) == 1


def test_sigterm_stops_a_sweep_saving_the_running_job_and_naming_the_jobs_not_run(tmp_path):
    """The running job saves at its next step boundary; the jobs after it are not run (nothing is
    left for them); the summary covers what ran; the sweep exits 143."""
    plugins = str(REPO / "tests" / "plugins")
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "train", "-m", *TINY, "trainer.max_steps=400",
         "data.dataset._target_=slow_data.slow_classification", "+data.dataset.seconds_per_item=0.002",
         "checkpoint.every_n_steps=1", "seed=1,2,3"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1",
             "PYTHONPATH": plugins + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("outputs/multirun/*/*/0/checkpoints/step_*.pt")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert "the sweep was stopped by SIGTERM" in err
    assert "jobs not run: 1 (seed=2); 2 (seed=3)" in err
    directory = sweep_dir(tmp_path)
    assert (directory / "0" / "checkpoints" / "last.pt").is_file()
    assert sorted(path.name for path in directory.iterdir() if path.is_dir()) == ["0"]
    rows = summary_rows(directory)
    assert [row["job"] for row in rows] == ["0"] and rows[0]["status"] == "incomplete"
