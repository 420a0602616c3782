"""One run, or one job of a sweep, from start to end: what ``python -m runner train`` does once Hydra
has composed the config and made the run directory. Hydra-free: the command line reads Hydra's facts
about the job once (``Job``) and what it found before Hydra ran (``Invocation``), and hands them over.

A run refused at its start leaves nothing behind: no new run directory, a resumed one as it was; the
refusal is raised (a ``UserError``) for the command line to say in one line. A sweep job records how
it ended in ``result.json`` and says it in one console line; a failed one returns NaN so that the
other jobs and the sweep's summary still run. A job an earlier run of its sweep finished is not run
again; one it left unfinished continues from its checkpoint."""

import logging
import math
import signal
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.checkpoint.durable import WriteError
from runner.checkpoint.locate import Found
from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.config.schema import RunConfig
from runner.config.trust import check_config_from_file
from runner.config.typed import as_dict, typed_config
from runner.experiment.job_facts import Invocation, Job, sweep_dir_of
from runner.experiment.resume import NothingToTrain
from runner.experiment.run_files import refuse_existing_run
from runner.experiment.sweep_job import gpu_of_parallel_job, objectives_of_job, search_trial, swept_settings
from runner.experiment.sweep_stop import WORKER_SWEEP_STOP, SweepStop
from runner.experiment.train import train
from runner.experiment.undo import remove_new_run_dir
from runner.observe.console import (
    IN_LOG_FILE_ONLY,
    job_ended,
    job_started,
    on_console_only,
    shown_path,
    sweep_job_console,
)
from runner.observe.records import RESULT_FILE, write_result
from runner.search.continuation import DamagedRecord, EarlierJob, OtherJobInTheWay, earlier_job
from runner.training.distributed import in_submitit_job

if TYPE_CHECKING:  # it imports optuna: only a search's jobs load it
    from runner.search.trial import SearchTrial

log = logging.getLogger("runner")


@dataclass
class Attempt:
    """A job as far as it got: what the way it ends depends on."""

    job: Job
    invocation: Invocation
    stop: SweepStop
    started: float = field(default_factory=time.time)
    config: RunConfig | None = None
    continuing: Found | None = None  # the checkpoint an earlier run of the sweep left
    search: "SearchTrial | None" = None

    def seconds(self) -> float:
        return time.time() - self.started


def run_job(cfg: Any, job: Job, invocation: Invocation, build: Callable[..., Any]) -> float | None:
    """Run the job: the best value of its monitored metric (None where it had none or did nothing; NaN
    for a sweep job that failed, was stopped or was not run). ``cfg``: the config as composed; ``build``
    makes objects from their ``_target_`` settings (Hydra's ``instantiate``)."""
    attempt = Attempt(job, invocation, sweep_stop_of(job, invocation))
    if job.in_sweep and attempt.stop.signal_number is not None:
        return not_run_after_stop(attempt)
    console = sweep_job_console(job.number, job.jobs_in_this_process) if job.in_sweep else nullcontext()
    with console:
        try:
            earlier = start(cfg, attempt, build)
            if earlier is not None and earlier.finished:
                return finished_earlier(attempt, earlier)
            ended = run_training(attempt, earlier, build)
        except SystemExit as error:
            if not (job.in_sweep and stops_the_sweep(attempt, error)):
                raise
            return stopped(attempt)
        except OtherJobInTheWay:
            restore_hydra_record(attempt)
            raise
        except NothingToTrain as done:
            return nothing_to_train(attempt, done)
        except DamagedRecord as error:
            return needs_a_look(attempt, error)
        except UserError as error:
            if not job.in_sweep:
                undo_hydra_writes(attempt)
                raise
            return refused_in_sweep(attempt, error)
        except Exception as error:
            record(attempt, "failed", error=f"{type(error).__name__}: {error}")
            if not job.in_sweep:
                raise
            return failed_in_sweep(attempt, error)
        return finish(attempt, ended.best_val, final_details(ended))


def sweep_stop_of(job: Job, invocation: Invocation) -> SweepStop:
    """The sweep's stop, watching for signals from the first job on where the jobs run in this process
    or its workers. A joblib worker's jobs share the worker's (each gets a copy of the invocation)."""
    stop = invocation.sweep_stop
    if job.in_sweep and job.jobs_in_workers:
        WORKER_SWEEP_STOP.swept = stop.swept
        stop = WORKER_SWEEP_STOP
    if job.in_sweep and (job.jobs_in_this_process or job.jobs_in_workers) and job.world_size == 1:
        stop.watch()
    return stop


def not_run_after_stop(attempt: Attempt) -> float:
    """A job the sweep's stop came before: not run, its directory left as it was."""
    job = attempt.job
    attempt.stop.skip(job.number, job.overrides)
    restore_hydra_record(attempt)  # a job an earlier run of the sweep started
    remove_new_run_dir(job.run_dir, keep=job.run_dir.parent)
    return math.nan


def start(cfg: Any, attempt: Attempt, build: Callable[..., Any]) -> EarlierJob | None:
    """The checks before anything of the run's own is written, and a sweep job's start line. Returns
    what an earlier run of the sweep left in the job's directory."""
    job, invocation = attempt.job, attempt.invocation
    config = attempt.config = typed_config(cfg)
    if not job.in_sweep and config.resume is None:  # a run directory a config file names
        refuse_existing_run(job.run_dir, f"hydra.run.dir={job.run_dir}")
    found = invocation.found
    if found is not None and invocation.trusted is not None:  # built from a run directory's record too
        check_config_from_file(
            as_dict(config), invocation.trusted,
            f"resume={found.run_dir}: the config composed with {found.run_dir / '.hydra'}",
            "give {first} on this command line",
        )  # fmt: skip
    earlier = earlier_job(job.run_dir, as_dict(config)) if job.in_sweep and config.resume is None else None
    if earlier is not None and earlier.finished:
        return earlier
    attempt.continuing = earlier.checkpoint if earlier is not None else None
    if job.in_sweep:
        continued = attempt.continuing
        step = f" (continuing from step {continued.checkpoint['global_step']})" if continued else ""
        job_started(swept_settings(job.overrides, attempt.stop.swept, job.sweeper) + step)
    if job.in_sweep and job.runner_search:
        sweep_dir = sweep_dir_of(job)
        attempt.search = search_trial(config, job.sweeper, sweep_dir, job.number, job.world_size, build)
    return earlier


def finished_earlier(attempt: Attempt, earlier: EarlierJob) -> float | None:
    """A job an earlier run of its sweep finished: not run again; its recorded best value."""
    assert attempt.config is not None
    restore_hydra_record(attempt)
    value = earlier.result.get("best")
    shown = "n/a" if not isinstance(value, (int, float)) else f"{value:.4g}"
    monitor = attempt.config.checkpoint.monitor
    on_console_only(logging.INFO, f"{earlier.result['status']} in an earlier run of this sweep "
                    f"(best {monitor} {shown}): not run again")  # fmt: skip
    return value


def run_training(attempt: Attempt, earlier: EarlierJob | None, build: Callable[..., Any]) -> TrainState:
    """Train: from the checkpoint ``resume=`` names, or the one an earlier run of the sweep left."""
    job, config, found = attempt.job, attempt.config, attempt.invocation.found
    assert config is not None
    resume_from = found if found is not None and config.resume == str(found.path) else attempt.continuing
    if earlier is not None:  # the result of a failed attempt; this one records its own
        (job.run_dir / RESULT_FILE).unlink(missing_ok=True)
    beside = runs_beside_others(job)
    with gpu_of_parallel_job(config.device, sweep_dir_of(job), job.number) if beside else nullcontext():
        return train(config, job.run_dir, build=build, resume_from=resume_from,
                     added_callbacks={"search": attempt.search} if attempt.search else None)  # fmt: skip


def runs_beside_others(job: Job) -> bool:
    """Whether other jobs of the sweep run at the same time on this machine (the joblib launcher); not
    under torchrun (each rank has its own GPU) nor in a submitit job (the scheduler gives each its own)."""
    return job.in_sweep and not (job.jobs_in_this_process or in_submitit_job() or job.world_size > 1)


def final_details(state: TrainState) -> dict[str, Any]:
    """What ``result.json`` says of a run's end besides its best value: the step of that value and the
    last validation's metrics."""
    return {"best_step": state.best_val_step, "final": dict(state.last_val), "step": state.step}


def finish(attempt: Attempt, best: float | None, details: dict[str, Any] | None = None) -> float | None:
    """Record how the run ended: ok, or pruned by its search (with the search's objective values).
    ``result.json`` names the monitored metric its ``best`` is of."""
    job, config, search = attempt.job, attempt.config, attempt.search
    assert config is not None
    monitor = config.checkpoint.monitor
    value = "n/a (no finite value)" if best is None else f"{best:.4g}"
    details = {"monitor": monitor, **(details or {})}
    if search is None:
        record(attempt, "ok", best=best, **details)
    else:
        objectives = {**search.objectives(objectives_of_job(job.sweeper, config)), monitor: best}
        if search.pruned_at is not None:
            record(attempt, "pruned", best=best, pruned_at_step=search.pruned_at, objectives=objectives,
                   **details)  # fmt: skip
            job_ended("pruned", attempt.seconds(), f"at step {search.pruned_at}; best {monitor} {value}")
            return best
        record(attempt, "ok", best=best, objectives=objectives, **details)
    if job.in_sweep:
        job_ended("ok", attempt.seconds(), f"best {monitor} {value}")
    return best


def stops_the_sweep(attempt: Attempt, error: SystemExit) -> bool:
    """Whether ``error`` is the job's exit for a signal that stops its sweep (jobs in this process or
    its workers)."""
    job = attempt.job
    if not (job.jobs_in_this_process or job.jobs_in_workers):
        return False
    return attempt.stop.stops(error, sweep_dir_of(job))


def stopped(attempt: Attempt) -> float:
    """A sweep job a signal stopped: it saved; the sweep stops after it."""
    stopped_by = signal.Signals(attempt.stop.signal_number).name
    job_ended("stopped", attempt.seconds(), f"by {stopped_by}", logging.WARNING)
    return math.nan


def nothing_to_train(attempt: Attempt, done: NothingToTrain) -> float | None:
    """The checkpoint resumed from has reached the end already. A sweep job continued from an earlier
    run of its sweep ended then, stopped before it said so: it says so now."""
    job, continuing, search = attempt.job, attempt.continuing, attempt.search
    if job.in_sweep and continuing is not None:
        restore_hydra_record(attempt)
        if search is not None:
            search.load_state_dict(continuing.checkpoint["callbacks_state_dict"].get("search", {}))
        return finish(attempt, continuing.checkpoint.get("best_val"))
    undo_hydra_writes(attempt)
    if job.in_sweep:
        job_ended("skipped", attempt.seconds(), str(done))
    else:
        print(f"runner: {done}", file=sys.stderr)
    return None


def needs_a_look(attempt: Attempt, error: DamagedRecord) -> float:
    """A sweep job whose earlier run's record cannot be read: not run, its directory as it was (a
    result that can be read is never replaced by one that says the record could not)."""
    restore_hydra_record(attempt)
    on_console_only(logging.WARNING, f"needs a look: {error}")
    return math.nan


def refused_in_sweep(attempt: Attempt, error: UserError) -> float:
    """A sweep job whose settings (or data, or checkpoint) are refused: it fails, the sweep goes on."""
    record(attempt, "failed", error=str(error))
    job_ended("failed", attempt.seconds(), str(error), logging.ERROR)
    return math.nan


def failed_in_sweep(attempt: Attempt, error: Exception) -> float:
    """A sweep job that raised: its traceback goes to its log file, one line to the console."""
    job = attempt.job
    log.exception("job failed", extra=IN_LOG_FILE_ONLY)  # the end line names the error
    log_file = shown_path(job.run_dir / f"{job.name}.log")
    summary = f"{type(error).__name__}: {error}".splitlines()[0]
    job_ended("failed", attempt.seconds(), f"{summary} (traceback in {log_file})", logging.ERROR)
    return math.nan


def record(attempt: Attempt, status: str, **details: Any) -> None:
    """``result.json``. Rank 0 alone: ranks that fail at the same step would otherwise write one file at
    once."""
    if attempt.job.rank != 0:
        return
    try:
        write_result(attempt.job.run_dir, status, attempt.seconds(), **details)
    except WriteError as error:  # the run's outcome is already said; the record is extra
        log.warning("could not record the result: %s", error)


def undo_hydra_writes(attempt: Attempt) -> None:
    """For a run refused before it wrote anything of its own: the directory as it was, or none."""
    job, before = attempt.job, attempt.invocation.before
    if job.rank != 0:
        return  # rank 0 alone: it wrote Hydra's record
    if before is not None and before.run_dir == job.run_dir.resolve():
        if before.untouched():
            before.restore()
    else:
        remove_new_run_dir(job.run_dir, keep=Path.cwd())


def restore_hydra_record(attempt: Attempt) -> None:
    """A job that is not run leaves its directory as it was: Hydra's record of it too."""
    before = attempt.invocation.before_jobs.get(attempt.job.run_dir.resolve())
    if before is not None and attempt.job.rank == 0:
        before.restore()
