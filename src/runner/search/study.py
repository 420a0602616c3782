"""Where a search's Optuna study lives, and how its trials are tied to sweep jobs: the parts both the
sweeper and its jobs (in other processes) need. Imports Optuna."""

import logging
from pathlib import Path

import optuna

SWEEP_ATTR = "runner_sweep_dir"  # a trial's user attributes: the sweep directory and job it ran as
JOB_ATTR = "runner_job"
FIXED_ATTR = "runner_fixed"  # the overrides every job of its search got (the command line's)
DEFAULT_STUDY = "runner"


def storage_url(storage: str | None, sweep_dir: Path) -> str:
    """The study's storage: the one configured, else an SQLite file in the sweep directory (on disk,
    so jobs in other processes report to it and a stopped search continues from it)."""
    return storage or f"sqlite:///{sweep_dir.resolve() / 'optuna.db'}"


def study_name_of(name: str | None) -> str:
    return name or DEFAULT_STUDY


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The study's database; an SQLite one waits up to a minute for a lock (parallel jobs write to one
    file)."""
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else None
    return optuna.storages.RDBStorage(url, engine_kwargs=engine)


def quiet_optuna() -> None:
    """Optuna's messages through Python's logging, as Hydra set it up (console and train.log, no
    colour codes in files), warnings only: the jobs' own lines say how each trial went."""
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
