"""Sweeps with Hydra multirun and the real plugins, and their summaries."""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from conftest import REPO, job_dir, read_scalars, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from runner.cli.main import main

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


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory) -> Path:
    """A grid sweep of 4 jobs through the CLI, once per module (a test that changes it copies it first)."""
    place = tmp_path_factory.mktemp("grid")
    result = run_cli("train", "-m", "optimizer.lr=0.001,0.01", "seed=0,1", *TINY, cwd=place)
    assert result.returncode == 0, result.stderr
    return sweep_dir(place)


def test_grid_sweep_summarises_itself(grid_sweep):
    directory = grid_sweep
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
    # Each job's directory (and TensorBoard run) is named by its number, zero-padded, and what it swept:
    # listed by name, the jobs are in order.
    assert sorted(path.name for path in directory.iterdir() if path.is_dir()) == [
        "000_optimizer.lr=0.001,seed=0", "001_optimizer.lr=0.001,seed=1",
        "002_optimizer.lr=0.01,seed=0", "003_optimizer.lr=0.01,seed=1",
    ]  # fmt: skip
    for job in range(4):
        run = job_dir(directory, job)
        assert (run / "checkpoints" / "last.pt").exists()
        scalars = read_scalars(run)
        assert float(rows[[r["job"] for r in rows].index(str(job))]["best_val_loss"]) == pytest.approx(
            min(value for _, value in scalars["val/loss"]), rel=1e-3
        )
        hparams = hparams_of_run(run)
        overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
        assert f"optimizer.lr={hparams['optimizer.lr']:g}" in overrides
        assert f"seed={hparams['seed']}" in overrides  # an integer, recorded as its text
        # The hparams live in the job's own run, not in a stray sub-run.
        assert not [path for path in run.iterdir() if path.is_dir() and any(path.glob("events.*"))]


def test_report_rebuilds_the_summary_of_an_interrupted_sweep(tmp_path, grid_sweep):
    directory = tmp_path / "sweep"
    shutil.copytree(grid_sweep, directory)
    for name in ("summary.csv", "summary.md", "summary.png"):
        (directory / name).unlink()
    (job_dir(directory, 1) / "result.json").unlink()  # as if job 1 had been killed
    report = run_cli("report", str(directory), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    rows = {row["job"]: row for row in summary_rows(directory)}
    assert rows["1"]["status"] == "incomplete" and rows["1"]["steps"] == "6"
    assert rows["0"]["status"] == "ok"
    assert (directory / "summary.png").exists()
    assert "| job | status | optimizer.lr |" in report.stdout

    single = run_cli("report", str(directory / "0"), cwd=tmp_path)  # job 0, by its number
    assert single.returncode == 0, single.stderr
    assert len(summary_rows(job_dir(directory, 0))) == 1


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
    log = (job_dir(directory, 1) / "train.log").read_text()
    assert "Traceback" in log and "deliberate failure for the test" in log


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


def sigterm_when(arguments, cwd, ready, env=None, settle=0.0):
    """Start ``python -m runner ARGUMENTS``, send SIGTERM once ``ready()`` (and ``settle`` seconds more);
    return its exit status and stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", *arguments], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    time.sleep(settle)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_sigterm_stops_a_sweep_saving_the_running_job_and_naming_the_jobs_not_run(tmp_path):
    """The running job saves at its next step boundary; the jobs after it are not run (nothing is
    left for them); the summary covers what ran; the sweep exits 143."""
    plugins = str(REPO / "tests" / "plugins")
    returncode, err = sigterm_when(
        ["train", "-m", *TINY, "trainer.max_steps=400", "data.dataset._target_=slow_data.slow_classification",
         "+data.dataset.seconds_per_item=0.002", "checkpoint.every_n_steps=1", "seed=1,2,3"],
        tmp_path, lambda: bool(list(tmp_path.glob("outputs/multirun/*/*/000_*/checkpoints/step_*.pt"))),
        env={"PYTHONPATH": plugins + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert returncode == 143, err
    assert "Traceback" not in err
    assert "the sweep was stopped by SIGTERM" in err
    assert "jobs not run: 1 (seed=2); 2 (seed=3)" in err
    directory = sweep_dir(tmp_path)
    assert (job_dir(directory, 0) / "checkpoints" / "last.pt").is_file()
    assert sorted(path.name for path in directory.iterdir() if path.is_dir()) == ["000_seed=1"]
    rows = summary_rows(directory)
    assert [row["job"] for row in rows] == ["0"] and rows[0]["status"] == "incomplete"


SEARCH = (
    "hparams_search=digits_optuna", "data=classification", "data.dataset.num_train=64",
    "data.dataset.num_val=32", "data.batch_size=16", "trainer.val_every_n_steps=2",
)  # fmt: skip


def results_of(directory):
    """Each job's result.json, by job number."""
    results = directory.glob("*/result.json")
    return {int(path.parent.name.split("_")[0]): json.loads(path.read_text()) for path in results}


def own_trials(storage):
    study = optuna.load_study(study_name="digits_optuna", storage=storage)
    return {trial.user_attrs["runner_job"]: trial for trial in study.trials}


PARALLEL = {
    "basic": (),
    "joblib": ("hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_jobs=2"),
    "submitit_local": ("hydra/launcher=submitit_local", "hydra.sweeper.n_jobs=2"),
}


@pytest.mark.parametrize("launcher", list(PARALLEL))
def test_an_optuna_search_prunes_the_trials_that_fall_behind(tmp_path, launcher):
    """Each job reports val/loss to its trial after every validation, through the study's SQLite file in
    the sweep directory (jobs of the joblib and submitit launchers are other processes); the pruner
    stops the jobs behind the median, which end cleanly, say so and keep their files."""
    directory = tmp_path / "search"
    result = run_cli(
        "train", "-m", *SEARCH, "trainer.max_steps=20", "hydra.sweeper.n_trials=6",
        "hydra/sweeper/pruner=median", "hydra.sweeper.pruner.n_startup_trials=2",
        *PARALLEL[launcher], f"hydra.sweep.dir={directory}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    results = results_of(directory)
    assert len(results) == 6
    pruned = {job: r["pruned_at_step"] for job, r in results.items() if r["status"] == "pruned"}
    assert pruned, results  # the search pruned at least one trial
    assert all(r["status"] == "ok" for job, r in results.items() if job not in pruned)
    trials = own_trials(f"sqlite:///{directory / 'optuna.db'}")
    assert {job for job, t in trials.items() if t.state == optuna.trial.TrialState.PRUNED} == set(pruned)
    output = result.stdout + result.stderr
    rows = {row["job"]: row for row in summary_rows(directory)}
    summary = (directory / "summary.md").read_text()
    for job, step in pruned.items():
        assert 0 < step < 20
        if launcher == "submitit_local":  # a submitit job's console is its log under .submitit/
            said = (job_dir(directory, job) / "train.log").read_text()
            assert "pruned in " in said and f"at step {step}; best val/loss" in said
        else:
            assert f"[job {job}] pruned in " in output and f"at step {step}; best val/loss" in output
        assert rows[str(job)]["status"] == "pruned" and rows[str(job)]["pruned_at_step"] == str(step)
        assert rows[str(job)]["steps"] == str(step)
        assert f"| {job} | pruned at step {step} |" in summary
        assert (job_dir(directory, job) / "checkpoints" / "last.pt").is_file()  # its checkpoints, events kept
        assert max(step for step, _ in read_scalars(job_dir(directory, job))["val/loss"]) == step
        assert trials[job].last_step == step * 16  # reported at samples seen (batch size 16)


def test_a_multi_objective_search_summarises_its_pareto_front(tmp_path):
    directory = tmp_path / "search"
    result = run_cli(
        "train", "-m", *SEARCH, "trainer.max_steps=6", "hydra.sweeper.n_trials=4",
        "hydra.sweeper.direction=[minimize,maximize]", "hydra.sweeper.objectives=[val/loss,val/acc]",
        f"hydra.sweep.dir={directory}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    solutions = yaml.safe_load((directory / "optimization_results.yaml").read_text())["solutions"]
    front = sorted(str(solution["job"]) for solution in solutions)
    assert front and all(len(solution["values"]) == 2 for solution in solutions)
    rows = summary_rows(directory)
    assert sorted(row["job"] for row in rows if row["pareto_front"] == "yes") == front
    for solution in solutions:
        row = next(row for row in rows if row["job"] == str(solution["job"]))
        loss, acc = solution["values"]
        assert float(row["best_val_loss"]) == pytest.approx(loss, rel=1e-6)
        assert float(row["val_acc_at_best"]) == pytest.approx(acc, rel=1e-6)
    assert (
        "Pareto front (minimize val/loss, maximize val/acc, each at the job's best validation): jobs "
        in (directory / "summary.md").read_text()
    )


def stop_during_job_1(command, cwd, env=None):
    """Start a sweep, SIGTERM it once job 0 has finished and job 1 has saved a checkpoint; return how
    it ended."""
    return sigterm_when(command, cwd, lambda: bool(list(cwd.glob("sweep/001_*/checkpoints/step_*.pt"))), env)


def untouched(job_dir):
    """Every file of a job directory, with its bytes and modification time."""
    return {str(p.relative_to(job_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(job_dir.rglob("*")) if p.is_file()}  # fmt: skip


SLOW = ("data.dataset._target_=slow_data.slow_classification", "+data.dataset.seconds_per_item=0.002",
        "checkpoint.every_n_steps=1", "trainer.max_steps=60", "trainer.val_every_n_steps=10")  # fmt: skip
PLUGINS = {"PYTHONPATH": str(REPO / "tests" / "plugins") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def left_behind(session: int) -> tuple[list[str], list[str]]:
    """The live processes of a session (zombies are the init process's to reap), and what joblib and its
    loky workers of the session's leader left in /dev/shm."""
    processes = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            processes.append(stat.parent.name)
    shm = Path("/dev/shm")
    leftovers = [p.name for p in shm.iterdir() if f"_{session}_" in p.name or f"-{session}-" in p.name]
    return processes, leftovers if shm.is_dir() else []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="telling the workers needs Linux's /proc")
def test_sigterm_stops_a_joblib_sweep_cleanly(tmp_path):
    """The sweep process passes the signal on to its workers: the running jobs save and stop, the job
    not started is not run, the summary is written, exit 143; no worker is left running, nothing is
    left in /dev/shm."""
    sweep = tmp_path / "sweep"
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "train", "-m", *TINY, "trainer.max_steps=400", *SLOW[:3],
         "seed=1,2,3", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **PLUGINS},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(sweep.glob("*/checkpoints/step_*.pt")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert "runner: the sweep was stopped by SIGTERM: the running jobs saved their checkpoints" in err
    assert "run the same command with hydra.sweep.dir=sweep" in err  # as the working directory sees it
    jobs = [job_dir(sweep, 0), job_dir(sweep, 1)]
    assert sorted(path for path in sweep.iterdir() if path.is_dir()) == jobs  # job 2 not run
    assert [row["status"] for row in summary_rows(sweep)] == ["incomplete", "incomplete"]
    for job in jobs:
        assert (job / "checkpoints" / "last.pt").is_file()
    deadline = time.monotonic() + 30
    while left_behind(process.pid) != ([], []):
        assert time.monotonic() < deadline, left_behind(process.pid)
        time.sleep(0.2)


def test_a_stopped_grid_sweep_continues_with_the_same_command(tmp_path):
    """Run again with the same hydra.sweep.dir, the sweep runs what is left: the finished job not again
    (its files untouched), the stopped job from its last.pt, to the same weights as a run never stopped."""
    command = ["train", "-m", *TINY[:4], *SLOW, "seed=1,2,3", "hydra.sweep.dir=sweep"]
    returncode, err = stop_during_job_1(command, tmp_path, PLUGINS)
    assert returncode == 143, err
    assert "jobs not run: 2 (seed=3)" in err and "run the same command with hydra.sweep.dir=sweep" in err
    directory = tmp_path / "sweep"
    finished = untouched(job_dir(directory, 0))

    again = run_cli(*command, cwd=tmp_path, env=PLUGINS)
    assert again.returncode == 0, again.stderr
    output = again.stdout + again.stderr
    assert "[job 0] ok in an earlier run of this sweep (best val/loss " in output
    assert "[job 1] started: seed=2 (continuing from step " in output
    assert "[job 2] started: seed=3" in output
    assert untouched(job_dir(directory, 0)) == finished  # train.log, events, checkpoints, Hydra's record
    rows = {row["job"]: row for row in summary_rows(directory)}
    assert [rows[job]["status"] for job in "012"] == ["ok", "ok", "ok"]
    assert all(rows[job]["steps"] == "60" for job in "012")
    steps = [step for step, _ in read_scalars(job_dir(directory, 1))["train/loss"]]
    assert steps == sorted(set(steps))  # one continuous curve: the lost steps were not logged twice

    single = run_cli("train", *TINY[:4], *SLOW, "seed=2", "hydra.run.dir=single", cwd=tmp_path, env=PLUGINS)
    assert single.returncode == 0, single.stderr
    continued = torch.load(job_dir(directory, 1) / "checkpoints" / "last.pt")["model_state_dict"]
    never_stopped = torch.load(tmp_path / "single" / "checkpoints" / "last.pt")["model_state_dict"]
    for key, tensor in never_stopped.items():
        assert torch.equal(continued[key], tensor), key


def test_sigterm_while_a_job_starts_stops_the_sweep_there(tmp_path):
    """Between two jobs' training (the next one loading its data), the signal is not lost: the starting
    job saves at its first step boundary, no other starts, the summary is written, exit 143."""
    sweep = tmp_path / "sweep"
    returncode, err = sigterm_when(
        ["train", "-m", *TINY[:4], *SLOW, "+data.dataset.seconds_to_build=3", "seed=1,2,3",
         "hydra.sweep.dir=sweep"],
        tmp_path, lambda: bool(list(sweep.glob("000_*/result.json")) and list(sweep.glob("001_*"))), PLUGINS,
        settle=0.5,  # job 1 is loading its data
    )  # fmt: skip
    assert returncode == 143, err
    assert "SIGTERM received: the sweep stops" in err and "Traceback" not in err
    assert "jobs not run: 2 (seed=3)" in err
    directory = tmp_path / "sweep"
    assert torch.load(job_dir(directory, 1) / "checkpoints" / "last.pt")["global_step"] == 1
    assert [row["status"] for row in summary_rows(directory)] == ["ok", "incomplete"]


def refused_here(tmp_path, monkeypatch, capsys, *arguments: str) -> str:
    """``python -m runner ARGUMENTS`` from ``tmp_path`` in this process (the real main, Hydra and all:
    a refusal needs no process of its own): exit 2; what it wrote to stderr."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(list(arguments))
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    return error


def test_a_sweep_directory_of_another_sweep_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys):
    first = run_cli("train", "-m", *TINY, "seed=1,2", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = untouched(job_dir(tmp_path / "sweep", 0))
    other = refused_here(
        tmp_path, monkeypatch, capsys, "train", "-m", *TINY, "seed=5,6", "hydra.sweep.dir=sweep"
    )
    assert "holds a run of other settings (seed (1 there, 5 now)): this sweep directory belongs to " in other
    assert "Traceback" not in other
    assert untouched(job_dir(tmp_path / "sweep", 0)) == before


def test_a_stopped_optuna_search_continues_its_study_with_the_same_command(tmp_path):
    """The finished trial is not run again, the stopped one continues with its own settings from its
    last.pt, and new trials are proposed for the jobs not yet run: the study ends with n_trials trials."""
    command = ["train", "-m", *SEARCH, *SLOW, "trainer.max_steps=40", "hydra.sweeper.n_trials=4",
               "hydra.sweep.dir=sweep"]  # fmt: skip
    returncode, err = stop_during_job_1(command, tmp_path, PLUGINS)
    assert returncode == 143, err
    assert "jobs not run: 2 more trial(s) of the search's 4" in err
    directory = tmp_path / "sweep"
    storage = f"sqlite:///{directory / 'optuna.db'}"
    stopped = own_trials(storage)
    assert stopped[0].state == optuna.trial.TrialState.COMPLETE
    assert stopped[1].state == optuna.trial.TrialState.RUNNING
    finished = untouched(job_dir(directory, 0))

    again = run_cli(*command, cwd=tmp_path, env=PLUGINS)
    assert again.returncode == 0, again.stderr
    output = again.stdout + again.stderr
    assert "continuing: 1 done before" in output
    assert "[job 0]" not in output  # the search does not launch a finished job at all
    assert "[job 1] started: " in output and " (continuing from step " in output
    assert untouched(job_dir(directory, 0)) == finished
    trials = own_trials(storage)
    assert sorted(trials) == [0, 1, 2, 3]
    assert len(optuna.load_study(study_name="digits_optuna", storage=storage).trials) == 4
    assert all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials.values())
    assert trials[1].params == stopped[1].params and trials[1].number == stopped[1].number
    results = results_of(directory)
    assert all(results[job]["best"] == pytest.approx(trials[job].value) for job in trials)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def finished_search(tmp_path_factory) -> Path:
    """A search of 2 trials through the CLI, its study in its sweep directory, once per module (tests
    copy it first: a study in the sweep directory goes with the directory)."""
    place = tmp_path_factory.mktemp("search")
    result = run_cli("train", "-m", *SEARCH, "trainer.max_steps=4", "hydra.sweeper.n_trials=2",
                     "hydra.sweep.dir=sweep", cwd=place)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return place / "sweep"


def test_optuna_dashboard_shows_the_study_of_a_search(tmp_path, finished_search):
    directory = tmp_path / "search"
    shutil.copytree(finished_search, directory)
    port = free_port()
    command = os.path.join(os.path.dirname(sys.executable), "optuna-dashboard")  # the README's command
    dashboard = subprocess.Popen(
        [command, f"sqlite:///{directory / 'optuna.db'}", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as response:
                    studies = json.load(response)["study_summaries"]
                break
            except OSError:
                assert dashboard.poll() is None and time.monotonic() < deadline, dashboard.communicate()
                time.sleep(0.2)
        (study,) = studies
        assert study["study_name"] == "digits_optuna"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}") as response:
            detail = json.load(response)
        assert [trial["state"] for trial in detail["trials"]] == ["Complete", "Complete"]
        assert detail["objective_names"] == ["val/loss"]  # its values by name, not "Objective 0"
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)


def test_a_finished_search_run_again_with_other_settings_is_refused(
    tmp_path, finished_search, monkeypatch, capsys
):
    shutil.copytree(finished_search, tmp_path / "sweep")
    before = {job: untouched(job_dir(tmp_path / "sweep", job)) for job in (0, 1)}
    multirun = (tmp_path / "sweep" / "multirun.yaml").read_bytes()
    other = refused_here(tmp_path, monkeypatch, capsys, "train", "-m", *SEARCH, "trainer.max_steps=4",
                         "hydra.sweeper.n_trials=2", "seed=7", "hydra.sweep.dir=sweep")  # fmt: skip
    assert "the sweep directory belongs to another search" in other and "Traceback" not in other
    assert {job: untouched(job_dir(tmp_path / "sweep", job)) for job in (0, 1)} == before
    assert (tmp_path / "sweep" / "multirun.yaml").read_bytes() == multirun


def test_the_grid_sampler_runs_every_combination_once(tmp_path):
    result = run_cli(
        "train", "-m", *SEARCH, "trainer.max_steps=4", "hydra/sweeper/sampler=grid",
        "hydra.sweeper.n_trials=10", "optimizer.lr=choice(0.001,0.01)", "model.hidden=choice([32],[64])",
        "hydra.sweep.dir=sweep", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = summary_rows(tmp_path / "sweep")
    assert sorted((row["optimizer.lr"], row["model.hidden"]) for row in rows) == [
        ("0.001", "[32]"), ("0.001", "[64]"), ("0.01", "[32]"), ("0.01", "[64]"),
    ]  # fmt: skip
    assert all(row["status"] == "ok" for row in rows)
