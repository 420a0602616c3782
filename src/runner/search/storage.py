"""Where a search's Optuna study lives: its storage opened from a URL (one line naming the setting
where it cannot be), and the study it already holds, read and checked to be readable."""

import time
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.exc import IntegrityError, ProgrammingError, SQLAlchemyError

from runner.config.errors import ConfigError
from runner.search.study import DEFAULT_STUDY

# What Optuna raises reading rows it did not write: JSON that is not, a distribution it refuses, a NULL
# value (its own assert), attributes nested past the recursion limit.
DAMAGED_STUDY = (ValueError, TypeError, KeyError, AssertionError, AttributeError, RecursionError)


TABLE_RACE_TRIES = 5
JOURNAL = "journal"  # hydra.sweeper.storage=journal: Optuna's journal file in the sweep directory


def storage_url(storage: str | None, sweep_dir: Path) -> str:
    """The study's storage: the one configured, else an SQLite file in the sweep directory (on disk,
    so jobs in other processes report to it and a stopped search continues from it). ``journal``:
    Optuna's journal file in the sweep directory, ``journal:<path>``: one elsewhere."""
    if storage == JOURNAL:
        return f"{JOURNAL}:{sweep_dir.resolve() / 'optuna.journal'}"
    return storage or f"sqlite:///{sweep_dir.resolve() / 'optuna.db'}"


def in_sweep_dir(storage: str | None) -> bool:
    """Whether the study lives in the sweep directory, so its trials are this sweep's alone (wherever
    the directory was moved)."""
    return storage in (None, JOURNAL)


def stored_study_exists(url: str) -> bool:
    """Whether a study file in the sweep directory is there already (else it is made only once the
    search's settings are checked)."""
    if url.startswith(f"{JOURNAL}:"):
        return Path(url.removeprefix(f"{JOURNAL}:")).exists()
    return Path(url.removeprefix("sqlite:///")).exists()


def study_name_of(name: str | None) -> str:
    return name or DEFAULT_STUDY


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """The study's storage: a journal file (``journal:<path>``, for several sweeper processes), or a
    database; an SQLite one waits up to a minute for a lock (parallel jobs write to one file)."""
    if url.startswith(f"{JOURNAL}:"):
        backend = optuna.storages.journal.JournalFileBackend(url.removeprefix(f"{JOURNAL}:"))
        return optuna.storages.JournalStorage(backend)
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else None
    for _ in range(TABLE_RACE_TRIES - 1):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine)
        except (IntegrityError, ProgrammingError):
            # Processes started together each create Optuna's tables in an empty database; all but one
            # are refused (PostgreSQL: "duplicate key ... pg_type"), and find the tables made a moment later.
            time.sleep(0.5)
    return optuna.storages.RDBStorage(url, engine_kwargs=engine)


def open_checked_storage(url: str) -> optuna.storages.BaseStorage:
    """The storage, or one line that names the setting, what was given and what is allowed (a wrong
    URL, a database that cannot be reached, a driver not installed)."""
    try:
        return open_storage(url)
    except Exception as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise ConfigError(
            f"hydra.sweeper.storage={url}: cannot open it ({reason[:300]}); give journal (a file in the "
            "sweep folder), an RDB URL such as postgresql://user@host/db, or sqlite:///outputs/optuna.db"
        ) from None


def existing_study(storage: Any, name: str) -> optuna.Study | None:
    """The study ``name`` if the storage holds it (with trials or not), else None."""
    try:  # Optuna reads each trial's distributions and attributes from JSON the database holds
        if name not in optuna.study.get_all_study_names(storage):
            return None
        study = optuna.load_study(study_name=name, storage=storage)
        study.get_trials(deepcopy=False)
    except (*DAMAGED_STUDY, SQLAlchemyError, optuna.exceptions.OptunaError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(
            f"hydra.sweeper.study_name={name}: the study in {getattr(storage, 'url', storage)} "
            f"cannot be read ({type(error).__name__}: {reason[:200]}); its database was changed by something "
            "other than Optuna: give this search another study_name (or hydra.sweep.dir)"
        ) from None
    return study
