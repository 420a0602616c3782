"""What the job lifecycle (``job.py``) is handed: Hydra's facts about the job, read once by the command
line, and what the command line found before Hydra ran. Plain data, light to import: the command line
builds them before anything loads torch."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.experiment.sweep_stop import SweepStop
from runner.experiment.undo import RunDirBefore

if TYPE_CHECKING:  # importing it loads torch
    from runner.checkpoint.locate import Found


@dataclass(frozen=True)
class Job:
    """What Hydra says about the job this process runs, read once by the command line."""

    run_dir: Path  # absolute: the run's directory, or the sweep job's
    name: str = "train"  # the job's name: its log file is <run_dir>/<name>.log
    in_sweep: bool = False
    number: int = 0  # the job's number in its sweep
    overrides: list[str] = field(default_factory=list)  # the job's task overrides, as written
    sweep_dir: Path | None = None  # a sweep job's sweep directory
    jobs_in_this_process: bool = False  # the sweep's jobs run one after another here (basic launcher)
    jobs_in_workers: bool = False  # in worker processes of the sweep process (the joblib launcher)
    # The sweeper's settings (params, objectives, pruner, storage), read only by what needs them.
    sweeper: Mapping[str, Any] = field(default_factory=dict)
    runner_search: bool = False  # the sweeper is runner's Optuna search: the job reports to its trial
    rank: int = 0  # this process's rank in a distributed run
    world_size: int = 1


def sweep_dir_of(job: Job) -> Path:
    """The sweep directory of a sweep job (only a sweep job's code asks for it)."""
    assert job.sweep_dir is not None, "a sweep job has a sweep directory"
    return job.sweep_dir


@dataclass
class Invocation:
    """What the command line found before Hydra ran, the same for every job it runs."""

    found: "Found | None" = None  # the checkpoint ``resume=`` names, located and loaded once
    trusted: set[str] | None = None  # the targets the command line names, for a resume's record
    before: RunDirBefore | None = None  # the run directory the command line names, as it was
    before_jobs: dict[Path, RunDirBefore] = field(default_factory=dict)  # a named sweep's job dirs
    sweep_stop: SweepStop = field(default_factory=SweepStop)
