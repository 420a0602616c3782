"""A run's or a sweep's folder, made ready before Hydra writes anything there: its links and the start
folder refused (``experiment.write_places``), its lock taken (``experiment.lock``) and held to the end of
the command, so that the check that it holds no other run (``fresh_run_dir``) and everything after it
happen under one lock. Two runs, or two sweeps, into one folder: the second is refused in one line,
before it writes."""

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.runner_optuna_sweeper.config import SWEEPER_TARGET
from runner.cli.exits import exit_with
from runner.config.errors import UserError
from runner.experiment.lock import RunDirBusy, hold, release_held
from runner.experiment.undo import remove_new_run_dir
from runner.experiment.write_places import check_not_start_folder, check_run_folder, check_sweep_folder
from runner.search import SEVERAL_PROCESSES, shared_by_processes

WRITING_COMMANDS = ("train", "lr_find")  # doctor writes nothing
# The folders lock_folder made, each with the folder above it that existed: one still empty at the end
# (a sweep its sweeper refused) is removed, so a refused command leaves nothing behind.
MADE: list[tuple[Path, Path]] = []


def given_value(config: DictConfig, key: str) -> str:
    section, _, name = key.rpartition(".")
    return str(OmegaConf.to_container(OmegaConf.select(config, section), resolve=False)[name])


def is_rank_zero() -> bool:
    """Rank 0 alone writes a run's folder and holds its lock (torchrun's other ranks run Hydra too)."""
    return os.environ.get("RANK", "0") == "0"


def lock_folder(folder: Path, advice: str = "") -> None:
    """Make ``folder`` and take its lock; a folder another process is writing exits in one line (with
    ``advice``). Where the folder cannot be made or written, Hydra's own attempt says why
    (``hydra_app.hydra_write_error``)."""
    nearest = next(above for above in (folder, *folder.parents) if above.exists())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if nearest != folder:
            MADE.append((folder, nearest))
        hold(folder)
    except RunDirBusy as error:
        exit_with(RunDirBusy(f"{error}{advice}") if advice else error)
    except (OSError, UserError):
        remove_new_run_dir(folder, keep=nearest)


def guard_run_dir(config: DictConfig, run_dir: Path) -> None:
    if config.hydra.job.name not in WRITING_COMMANDS:
        return
    given = given_value(config, "hydra.run.dir")
    try:
        check_not_start_folder(run_dir, "hydra.run.dir", given)
        check_run_folder(run_dir, f"hydra.run.dir={given}")
    except UserError as error:  # every rank alike
        exit_with(error)
    if is_rank_zero():
        lock_folder(run_dir)


def guard_sweep_dir(config: DictConfig, sweep_dir: Path) -> None:
    given = given_value(config, "hydra.sweep.dir")
    try:
        if not (sweep_dir / "multirun.yaml").is_file():  # a sweep there already may be continued
            check_not_start_folder(sweep_dir, "hydra.sweep.dir", given)
        check_sweep_folder(sweep_dir, f"hydra.sweep.dir={given}")
    except UserError as error:
        exit_with(error)
    if not is_rank_zero() or shared_by_search_processes(config):
        return  # the processes of one search share its folder; each claims its jobs (search.claims)
    advice = ""
    if config.hydra.sweeper.get("_target_") == SWEEPER_TARGET:  # a search on an SQLite study
        advice = f"; several processes of one search need a storage made for it: {SEVERAL_PROCESSES}"
    lock_folder(sweep_dir, advice)


def shared_by_search_processes(config: DictConfig) -> bool:
    """Whether the sweep is runner's Optuna search on a storage made for several processes (a journal
    file or a database server, not SQLite)."""
    sweeper = config.hydra.sweeper
    storage = sweeper.get("storage")
    return sweeper.get("_target_") == SWEEPER_TARGET and shared_by_processes(
        None if storage is None else str(storage)
    )


def release_folders() -> None:
    """At the command's end, however it ends: the locks released, the folders made for nothing removed."""
    release_held()
    for folder, nearest in MADE:
        while folder != nearest and nearest in folder.parents:
            try:
                folder.rmdir()  # only an empty one
            except OSError:
                break
            folder = folder.parent
    MADE.clear()
