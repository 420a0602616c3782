"""``python -m runner train [overrides]``: check the command line, rewrite it for a resume or for
torchrun, then run (or sweep) under Hydra. What Hydra says about each job is read once (``cli/hydra/job.py``)
and handed to the Hydra-free job lifecycle (``runner.experiment.job``)."""

import os
from pathlib import Path

from omegaconf import DictConfig

from runner.cli.arguments import CommandLine, value_text
from runner.cli.exits import exit_with
from runner.cli.hydra.fresh_run_dir import check_new_run_dir
from runner.cli.hydra.hydra_app import check_command_line, run_hydra, trusted_targets
from runner.cli.hydra.job import build, output_dir, this_job
from runner.cli.processes import worker_stop
from runner.cli.processes.submitit_tasks import submitit_tasks_as_ranks
from runner.cli.processes.torchrun import alone_under_torchrun, under_torchrun
from runner.cli.resume_line import with_resume
from runner.config.errors import UserError
from runner.experiment.job_facts import Invocation
from runner.experiment.sweep_stop import SweepStop
from runner.experiment.undo import RunDirBefore


def train_task(cfg: DictConfig, invocation: Invocation | None = None) -> float | None:
    """One run, or one job of a sweep (see ``runner.experiment.job``); a refusal exits in one line."""
    from runner.experiment.job import run_job  # loads torch: only once Hydra has composed

    with submitit_tasks_as_ranks(output_dir()):  # sets a task's RANK
        try:
            return run_job(cfg, this_job(), invocation or Invocation(), build=build)
        except UserError as error:
            exit_with(error)


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
