"""Several sweeper processes on one search: the same command started twice cooperates on one study
(a journal file, or a real PostgreSQL server), and a process SIGKILLed mid-trial loses no trial."""

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import REPO, run_cli

from runner.experiment.lock import hold, release_held

pytestmark = pytest.mark.slow  # real processes side by side: the processes are the point

SEARCH = (
    "train", "-m", "hparams_search=digits_optuna", "data=classification", "data.dataset.num_train=64",
    "data.dataset.num_val=32", "data.batch_size=16", "trainer.val_every_n_steps=2",
)  # fmt: skip
# Jobs long enough to be killed mid-way, with a checkpoint at every step.
SLOW = ("data.dataset._target_=slow_data.slow_classification", "+data.dataset.seconds_per_item=0.002",
        "checkpoint.every_n_steps=1", "trainer.max_steps=60", "trainer.val_every_n_steps=10")  # fmt: skip
PLUGINS = {"PYTHONPATH": str(REPO / "tests" / "plugins") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def start(*arguments: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *arguments], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **PLUGINS},
    )  # fmt: skip


def study_of(storage) -> optuna.Study:
    return optuna.load_study(study_name="digits_optuna", storage=storage)


def journal(sweep: Path):
    return optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal"))
    )


def sbatch_command() -> list[str]:
    """The search command of the SLURM recipe in docs/sweeps.md, as each array task runs it."""
    page = (REPO / "docs" / "sweeps.md").read_text()
    script = page.split("#SBATCH --array=0-15%8", 1)[1].split("```", 1)[0]
    line = script[script.index("python -m runner ") :].replace("\\\n", " ")
    return line.split()[3:]  # after python -m runner


def test_the_slurm_recipe_command_run_twice_at_once_shares_one_journal_study(tmp_path):
    """Two array tasks, started together: exactly n_trials trials, each job run once, in folders of
    their own, settings proposed once each, one summary of every job; submitting the array again
    runs nothing that finished."""
    tiny = ("data=classification", "data.dataset.num_train=64", "data.dataset.num_val=32",
            "data.batch_size=16", "trainer.val_every_n_steps=2", "trainer.max_steps=4")  # fmt: skip
    command = [
        "hydra.sweeper.n_trials=4" if word.startswith("hydra.sweeper.n_trials=") else word
        for word in sbatch_command()
    ]
    assert "hydra.sweeper.storage=journal" in command and "hydra.sweep.dir=outputs/search" in command
    processes = [start(*command, *tiny, cwd=tmp_path) for _ in range(2)]
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
    sweep = tmp_path / "outputs" / "search"
    trials = study_of(journal(sweep)).trials
    assert len(trials) == 4
    assert all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials)
    assert sorted(trial.user_attrs["runner_job"] for trial in trials) == [0, 1, 2, 3]
    assert len({tuple(sorted(trial.params.items())) for trial in trials}) == 4
    started = re.findall(r"\[job (\d+)\] started: ", "".join(out + err for out, err in outputs))
    assert sorted(started) == ["0", "1", "2", "3"]  # each job run once, by one of the processes
    assert sorted(path.name[:3] for path in sweep.glob("0*")) == ["000", "001", "002", "003"]
    assert len((sweep / "summary.csv").read_text().splitlines()) == 1 + 4
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == min(trial.value for trial in trials)

    again = run_cli(*command, *tiny, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "continuing: 4 done before" in again.stdout + again.stderr
    assert "] started: " not in again.stdout + again.stderr
    assert len(study_of(journal(sweep)).trials) == 4


def test_a_second_process_of_a_search_on_sqlite_is_refused_naming_the_alternative(tmp_path):
    """This process holds the sweep folder as a first sweeper process does; the second is refused in one
    line that names the storages made for several processes, and writes nothing."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    hold(sweep)
    try:
        second = run_cli(*SEARCH, "hydra.sweeper.n_trials=1", "hydra.sweep.dir=sweep", cwd=tmp_path)
    finally:
        release_held(sweep)
    assert second.returncode == 2, second.stderr
    assert second.stderr.startswith("runner: error: ") and len(second.stderr.strip().splitlines()) == 1
    assert f"{sweep} is being written by pid {os.getpid()}" in second.stderr
    assert "use hydra.sweeper.storage=journal" in second.stderr
    assert list(sweep.iterdir()) == []  # nothing written there (the lock file went with its release)


def postgres_bin() -> Path | None:
    found = shutil.which("pg_ctl") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))), None)
    return Path(found).resolve().parent if found else None


def as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL server on 127.0.0.1 (Debian's ``postgresql``, which ``.ci/run`` installs),
    its data in a temporary folder; the URL of an empty database on it."""
    binaries = postgres_bin()
    if binaries is None:
        pytest.skip("PostgreSQL is not installed here (.ci/run installs Debian's postgresql package)")
    data = Path(tempfile.mkdtemp(prefix="runner-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    subprocess.run(as_server_user([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "runner"]),
                   check=True, capture_output=True)  # fmt: skip
    options = f"-k {data} -p {port} -c listen_addresses=127.0.0.1"
    log = str(data / "server.log")
    pg_ctl = str(binaries / "pg_ctl")
    subprocess.run(as_server_user([pg_ctl, "-D", str(data), "-o", options, "-w", "-l", log, "start"]),
                   check=True, capture_output=True)  # fmt: skip
    try:
        createdb = [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "runner", "search"]
        subprocess.run(createdb, check=True, capture_output=True)
        yield f"postgresql+psycopg://runner@127.0.0.1:{port}/search"
    finally:
        subprocess.run(
            as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]), capture_output=True
        )
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.parametrize("storage", ["journal", "postgresql"])
def test_a_killed_process_trial_is_run_again_by_the_other_and_counted_once(tmp_path, storage, request):
    """Two processes, one SIGKILLed while both run a job: the other takes the killed one's job over
    once its own ends (the same trial, continued from its checkpoint), and the study ends with
    n_trials trials, every one complete."""
    url = request.getfixturevalue("postgres") if storage == "postgresql" else "journal"
    command = (
        *SEARCH,
        *SLOW,
        "hydra.sweeper.n_trials=2",
        f"hydra.sweeper.storage={url}",
        "hydra.sweep.dir=sweep",
    )
    doomed, survivor = start(*command, cwd=tmp_path), start(*command, cwd=tmp_path)
    deadline = time.monotonic() + 180
    while len({path.parent.parent for path in tmp_path.glob("sweep/0*/checkpoints/step_*.pt")}) < 2:
        assert doomed.poll() is None and survivor.poll() is None, doomed.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)  # reaped: its pid is gone, as its parent would see to
    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err
    assert " (continuing from step " in out + err  # the killed job went on from its checkpoint
    trials = study_of(journal(tmp_path / "sweep") if storage == "journal" else url).trials
    assert len(trials) == 2
    assert all(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials)
    assert sorted(trial.user_attrs["runner_job"] for trial in trials) == [0, 1]
    assert len((tmp_path / "sweep" / "summary.csv").read_text().splitlines()) == 1 + 2
