"""``python -m runner train [overrides]``: check the command line, rewrite it for a resume or for
torchrun, then run (or sweep) under Hydra. What Hydra says about each job is read here once and
handed to the Hydra-free job lifecycle (``runner.experiment.job``)."""

import os
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runner.cli.arguments import CommandLine, value_text
from runner.cli.exits import exit_with
from runner.cli.fresh_run_dir import check_new_run_dir
from runner.cli.hydra_app import check_command_line, run_hydra, trusted_targets
from runner.cli.processes import worker_stop
from runner.cli.processes.submitit_tasks import submitit_tasks_as_ranks
from runner.cli.processes.torchrun import alone_under_torchrun, under_torchrun
from runner.cli.resume_line import with_resume
from runner.config.errors import UserError
from runner.experiment.job_facts import Invocation, Job
from runner.experiment.sweep_stop import SweepStop
from runner.experiment.undo import RunDirBefore


def train_task(cfg: DictConfig, invocation: Invocation | None = None) -> float | None:
    """One run, or one job of a sweep (see ``runner.experiment.job``); a refusal exits in one line."""
    from runner.experiment.job import run_job  # loads torch: only once Hydra has composed

    hydra_config = HydraConfig.get()
    with submitit_tasks_as_ranks(Path(hydra_config.runtime.output_dir)):  # sets a task's RANK
        try:
            return run_job(
                cfg, job_of(hydra_config), invocation or Invocation(), build=hydra.utils.instantiate
            )
        except UserError as error:
            exit_with(error)


def job_of(hydra_config: Any) -> Job:
    """What Hydra says about the job being run, and its place in a distributed run."""
    in_sweep = hydra_config.mode == RunMode.MULTIRUN
    launcher = str(hydra_config.launcher.get("_target_", ""))
    return Job(
        run_dir=Path(hydra_config.runtime.output_dir),
        name=hydra_config.job.name,
        in_sweep=in_sweep,
        number=hydra_config.job.num if in_sweep else 0,  # unset outside a sweep
        # As written: an override may hold an interpolation that typed_config() names if it fails.
        overrides=OmegaConf.to_container(hydra_config.overrides.task, resolve=False),
        sweep_dir=Path(hydra_config.sweep.dir) if in_sweep else None,
        jobs_in_this_process="BasicLauncher" in launcher,
        jobs_in_workers="JoblibLauncher" in launcher,
        sweeper=hydra_config.sweeper,
        runner_search=in_sweep and is_runner_search(hydra_config.sweeper),
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
    )


def is_runner_search(sweeper: Any) -> bool:
    """Whether the sweep is runner's Optuna search (its jobs report to their trials)."""
    from hydra_plugins.runner_optuna_sweeper.config import SWEEPER_TARGET

    return sweeper.get("_target_") == SWEEPER_TARGET


def jobs_before(command_line: CommandLine) -> dict[Path, RunDirBefore]:
    """The job directories of the sweep directory the command line names, as they are before Hydra
    writes its record of each job into them (a job that is not run again gets its own back)."""
    named = command_line.last("hydra.sweep.dir")
    if not command_line.sweep or named is None:
        return {}
    sweep_dir = Path(value_text(named))
    if not sweep_dir.is_dir():
        return {}
    return {
        path.resolve(): RunDirBefore.of(path) for path in sweep_dir.iterdir() if (path / ".hydra").is_dir()
    }


def main_train(arguments: list[str]) -> None:
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    try:
        command_line = CommandLine.parse(arguments)
        check_command_line(command_line)
        # What this command line names, before a run directory's record is added to it (a resume's).
        trusted = trusted_targets(command_line) if command_line.last("resume") is not None else set()
        command_line, found = with_resume(command_line, trusted)
        command_line = under_torchrun(command_line) if distributed else alone_under_torchrun(command_line)
        check_new_run_dir(command_line)
        # A directory the command line names may exist (a resume's, one a scheduler reruns in): a
        # refused run leaves it as it was.
        named_dir = command_line.last("hydra.run.dir")
        named = None if command_line.sweep or named_dir is None else Path(str(named_dir.value()))
        before = RunDirBefore.of(named) if named is not None else None
        before_jobs = jobs_before(command_line)
    except UserError as error:
        if distributed:  # every rank refuses alike, each in one line
            from runner.training.distributed import stop_process_group

            stop_process_group()
        exit_with(error)
    sweep_stop = SweepStop([o.key_or_group for o in command_line.overrides if o.is_sweep_override()])
    exit_code = None
    try:
        invocation = Invocation(found, trusted, before, before_jobs, sweep_stop)
        run_hydra(lambda cfg: train_task(cfg, invocation), command_line)
    except SystemExit as error:
        if sweep_stop.signal_number is None and not worker_stop.received:
            raise
        exit_code = error.code
    finally:
        sweep_stop.unwatch()
        worker_stop.unwatch()
        if distributed:
            from runner.training.distributed import stop_process_group

            stop_process_group()
    if sweep_stop.signal_number is not None:
        sweep_stop.report(exit_code)
    if worker_stop.received:
        worker_stop.report()
