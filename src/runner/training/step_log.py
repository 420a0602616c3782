"""The log step: what the loop logs every ``log_every_n_steps`` besides the values the step read, and
where it all goes (the logger, the progress bar, the callbacks' metrics). It owns the logger the loop
was given, so a callback's scalar (``Context.log``) and the out-of-memory split's (``oom.py``) go through
:meth:`StepLog.scalar`."""

import time
from dataclasses import dataclass, field

import torch

from runner.checkpoint.state import TrainState
from runner.observe.progress import Progress
from runner.observe.records import MAX_MEMORY_ALLOCATED, SAMPLES_PER_SEC
from runner.observe.writer import MetricLogger
from runner.training.callbacks import Context
from runner.training.time_shares import StepTimes


@dataclass
class StepLog:
    """The samples trained since the last log step (``samples``, counted by the loop) and when that
    was, for the samples per second; the time shares; this process's peak memory on a GPU."""

    logger: MetricLogger
    progress: Progress
    times: StepTimes
    device: torch.device
    samples: int = 0
    since: float = field(default_factory=time.perf_counter)

    def scalar(self, tag: str, value: float, step: int) -> None:
        """One scalar at ``step``."""
        self.logger.log_scalars(step, {tag: value})

    def write(self, state: TrainState, scalars: dict[str, float], context: Context) -> None:
        """``scalars``: what the step read (``engine.step_scalars``), read before this call: on a GPU
        the read waits for the step, so the clock below counts it."""
        now = time.perf_counter()
        scalars[SAMPLES_PER_SEC] = self.samples / max(now - self.since, 1e-9)
        self.samples, self.since = 0, now
        scalars.update(self.times.shares())  # vitals/time/*; from here on, runner's own work
        if self.device.type == "cuda":  # this process's peak so far
            scalars[MAX_MEMORY_ALLOCATED] = torch.cuda.max_memory_allocated(self.device) / 2**30
        state.last_train_loss, state.last_train_loss_step = scalars["train/loss"], state.step
        self.logger.log_scalars(state.step, scalars)
        self.progress.update(state.step, scalars)
        context.metrics.update(scalars)
        self.times.now_in("compute")
