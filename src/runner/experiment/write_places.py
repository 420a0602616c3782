"""Where a run or a sweep may write: checked before anything is written there (before Hydra's record).
runner and Hydra write their files by name into the folder asked for (``.hydra/config.yaml``,
``train.log``, ``multirun.yaml``, a job's folder); a link planted under one of those names would take the
writes out of the folder, onto whatever it points to (``sw/000_seed=0 -> ../victim``). So a link inside a
run or sweep folder, or a file where a job's folder goes, is refused by name; and so is the folder runner
was started in, where a run's files would land among the user's own."""

import os
from pathlib import Path

from runner.config.errors import ConfigError
from runner.config.job_dirs import job_number
from runner.experiment.run_files import EVENTS_PREFIX, RUN_PLACES, run_files_in

HYDRA_RECORD_DIR = ".hydra"


def entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
    except OSError:
        return []


def shown(path: Path) -> str:
    """``path`` as the user would name it: relative to the current folder where it lies inside."""
    try:
        return str(path.relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(path)


def refuse_link(path: Path, given: str) -> None:
    if path.is_symlink():
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise ConfigError(
            f"{given}: {shown(path)} is a link (to {target}); runner writes into the folder asked for, never "
            "through a link out of it: remove the link, or choose another folder"
        )


def check_run_folder(run_dir: Path, given: str) -> None:
    """No link among a run folder's entries or in its ``.hydra/``; the run folder is a folder, and each
    name runner and Hydra write there is of the kind they write, if it exists at all."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{given}: {shown(run_dir)} is a file, not a folder; choose a folder for the run")
    for path in entries(run_dir):
        refuse_link(path, given)
    check_run_places(run_dir, given)
    for path in entries(run_dir / HYDRA_RECORD_DIR):
        refuse_link(path, given)


def check_run_places(run_dir: Path, given: str) -> None:
    """A folder where a run writes a file (``train.log``), or a file where it makes a folder
    (``checkpoints``), would fail its write half-way through the run, after others: refused by name
    before anything is written."""
    for name, (folder, holds) in RUN_PLACES.items():
        path = run_dir / name
        if path.is_symlink() or not path.exists() or path.is_dir() == folder:
            continue  # a link is refused as one (refuse_link)
        found, wanted = ("a file", "a folder") if folder else ("a folder", "a file")
        raise ConfigError(
            f"{given}: {shown(path)} is {found} where the run keeps {holds} ({wanted}); move it away, "
            "or choose another folder for the run"
        )


def check_sweep_folder(sweep_dir: Path, given: str) -> None:
    """No link in a sweep folder, nor in its jobs' folders; no file where a job's folder goes; not a
    run's folder (the sweep's summary would describe that run)."""
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise ConfigError(
            f"{given}: {shown(sweep_dir)} is a file, not a folder; choose a folder for the sweep"
        )
    found = [name for name in run_files_in(sweep_dir) if not name.startswith(EVENTS_PREFIX)]  # its HParams
    if found:
        raise ConfigError(
            f"{given}: {shown(sweep_dir)} holds a run ({', '.join(found[:3])}), not a sweep; give the sweep "
            "a folder of its own (hydra.sweep.dir=NEW_DIR), or leave hydra.sweep.dir out"
        )
    for path in entries(sweep_dir):
        refuse_link(path, given)
        if job_number(path.name) is not None and not path.is_dir():
            raise ConfigError(
                f"{given}: {shown(path)} is a file where job {job_number(path.name)}'s folder goes; remove "
                "it, or choose another folder for the sweep"
            )
        if path.is_dir() and job_number(path.name) is not None:
            check_run_folder(path, given)


def check_not_start_folder(folder: Path, key: str, given: str) -> None:
    """The folder runner was started in, among the user's own files, is no run's or sweep's folder (a
    run already there may be continued: ``resume=.``)."""
    try:
        start = Path.cwd().resolve()
    except OSError:
        return
    if folder.resolve() == start and not run_files_in(folder):
        raise ConfigError(
            f"{key}={given}: {folder} is the folder runner was started in; its files would land among yours "
            f"there; give a folder of its own ({key}=DIR), or leave {key} out (outputs/<date>/<time>)"
        )
