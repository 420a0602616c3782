"""The end of a run, however it comes: fit to the end, save ``last.pt``, close the writers, say how it ended.

The loop stops at a step boundary for a signal, or for a write that failed in the background (a full
disk under the event file or a checkpoint): the run then saves that boundary's state if it can, and
ends with one line naming the file that could not be written and the last good checkpoint.
"""

import logging
import signal
import statistics
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from runner.checkpoint.durable import WriteError
from runner.checkpoint.policy import Checkpointer
from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.experiment.relaunch import resume_command
from runner.experiment.watch import RunWatch, watch_of
from runner.observe.writer import MetricLogger
from runner.training.callbacks import Callbacks
from runner.training.distributed import ProcessInfo, any_process
from runner.training.engine import Hooks, Loaders, LoopSettings, fit
from runner.training.oom import OutOfMemoryStop
from runner.training.schedules import Schedule
from runner.training.signals import GracefulStop
from runner.training.step import Learner

__all__ = [
    "WRITE_FAILED",
    "Run",
    "RunStop",
    "report_end",
    "resume_advice",
    "watch_of",
    "with_resume_advice",
]  # watch_of: for train.py
log = logging.getLogger("runner")
WRITE_FAILED = 1 << 16  # agreed between processes like a signal number, and above every one


@dataclass
class RunStop:
    """The loop's stop flag: a signal (:class:`GracefulStop`), or a write that failed in the background
    (the event file's or a checkpoint's), which ends the run at this step boundary: raised there, so
    the run can still save the state of that boundary. Every process decides alike."""

    signals: GracefulStop
    logger: MetricLogger
    checkpointer: Checkpointer

    def requested(self) -> int | None:
        failure = self.logger.error or self.checkpointer.failure()
        agreed = any_process(WRITE_FAILED if failure else self.signals.signal_number or 0)
        if agreed == WRITE_FAILED:
            raise failure or UserError("stopped: rank 0 cannot write the run's files (its error says which)")
        return agreed or None


@dataclass
class Run:
    """Fit, save ``last.pt`` and close the writers, however the run ends."""

    learner: Learner
    schedule: Schedule
    loaders: Loaders
    settings: LoopSettings
    callbacks: Callbacks
    logger: MetricLogger
    checkpointer: Checkpointer
    watch: RunWatch = field(default_factory=RunWatch)  # time shares, profile, compile time (watch.py)

    def to_the_end(
        self, state: TrainState, at_the_end: Callable[[TrainState], None]
    ) -> tuple[TrainState, Path | None, GracefulStop]:
        """``at_the_end``: what the run logs once trained and saved."""
        try:
            with GracefulStop() as stop:  # also covers the last save: a second Ctrl-C aborts it
                hooks = Hooks(self.logger, self.checkpointer, RunStop(stop, self.logger, self.checkpointer),
                              self.callbacks, self.watch.times)  # fmt: skip
                try:
                    state = fit(self.learner, self.schedule, self.loaders, self.settings, hooks, state)
                    self.watch.end(state, self.logger, getattr(self.loaders.train, "num_workers", None))
                except (WriteError, OutOfMemoryStop):
                    with suppress(Exception):  # the state of the step boundary it stopped at, if it can
                        self.checkpointer.save_last(state)
                    raise
                last = self.checkpointer.save_last(state)
            at_the_end(state)
        except BaseException as error:
            self.close(already=error)
            raise
        return state, last, stop

    def close(self, already: BaseException | None = None) -> None:
        """Finish the saves begun, close the event file; raise a write that failed, unless an error is
        already on its way (``already``): that one is reported, and another one logged."""
        try:
            try:
                self.watch.close()
                self.checkpointer.close()
            finally:
                self.logger.close()
        except Exception as error:
            if already is None:
                raise
            if error is not already:
                log.warning("also, while stopping: %s", error)


def resume_advice(error: WriteError, last_good: Path | None, run_dir: Path) -> str:
    when = "once there is space" if error.no_space else "once it can be written"
    if last_good is None:
        return f"the last good checkpoint is none (start the run again {when})"
    resume = resume_command(run_dir)
    return f"the last good checkpoint is {last_good} (resume with: {resume} {when})"


def with_resume_advice(error: Exception, last_good: Path | None, run_dir: Path) -> Exception:
    """A write that failed (a full disk) with what to do: the last good checkpoint and the command that
    resumes from it; any other error as it is."""
    if isinstance(error, WriteError):
        return error.with_advice(resume_advice(error, last_good, run_dir))
    return error


def report_end(
    state: TrainState, checkpointer: Checkpointer, last: Path | None, run_dir: Path, process: ProcessInfo
) -> None:
    if checkpointer.save_seconds:
        pauses = checkpointer.save_seconds
        writes = getattr(checkpointer, "write_seconds", None)  # none: written while training paused
        background = (
            f", writing took {1000 * statistics.median(writes):.1f} ms (median) in the background"
            if writes
            else ""
        )
        log.info(
            "checkpoints: %d saves; training paused %.1f ms per save (median, max %.1f ms)%s",
            len(pauses), 1000 * statistics.median(pauses), 1000 * max(pauses), background,
        )  # fmt: skip
    if state.stopped_by_signal is not None:
        name = signal.Signals(state.stopped_by_signal).name
        if not process.is_main:
            log.warning("stopped by %s at step %d; rank 0 saves the checkpoint", name, state.step)
            return
        saved = f"saved {last}" if last else "nothing saved (checkpoint.enabled=false)"
        log.warning("stopped by %s at step %d; %s", name, state.step, saved)
        if last:
            log.warning("resume with: %s", resume_command(run_dir))
        return
    if state.stop_reason is not None:
        log.info("stopped at step %d (epoch %d): %s", state.step, state.epoch, state.stop_reason)
    metrics = " ".join(f"{name}={value:.4g}" for name, value in state.last_val.items())
    best = f"{state.best_val:.4g} at step {state.best_val_step}" if state.best_val is not None else "n/a"
    log.info("done: step=%d epoch=%d %s | best %s", state.step, state.epoch, metrics, best)
