"""Where a search's Optuna study lives: its storage opened from a URL (one line naming the setting
where it cannot be), and the study it already holds, read and checked to be readable."""

from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.exc import SQLAlchemyError

from runner.config.errors import ConfigError
from runner.search.study import DEFAULT_STUDY

# What Optuna raises reading rows it did not write: JSON that is not, a distribution it refuses, a NULL
# value (its own assert), attributes nested past the recursion limit.
DAMAGED_STUDY = (ValueError, TypeError, KeyError, AssertionError, AttributeError, RecursionError)


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


def open_checked_storage(url: str) -> optuna.storages.RDBStorage:
    try:
        return open_storage(url)
    except Exception as error:
        reason = str(error).splitlines()[0]
        raise ConfigError(
            f"hydra.sweeper.storage={url}: cannot open it ({reason}); give an Optuna storage URL such as "
            "sqlite:///outputs/optuna.db"
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
