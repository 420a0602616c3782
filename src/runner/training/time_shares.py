"""Where a run's wall time goes: waiting for data, computing, validating, and runner's own work
(logging, checkpoint pauses), as shares of the time between log steps.

The loop says which phase it is in (:meth:`StepTimes.now_in`); the clock is ``time.perf_counter``, read
on the host only, so it adds no device sync. Compute is what the step takes on the host: with the
non-finite guard (``on_nonfinite``, on by default) that includes waiting for the device once per step;
without it, queued device work is waited for at the next read (a log step's), counted as compute there.
The phases also name the profiler's ranges (``training/phases.py``), when it records.
"""

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.training.phases import Ranges

SHARES = ("data", "compute", "validation", "runner")
PHASE_SHARE = {"data": "data", "compute": "compute", "validation": "validation"}  # else: runner's
STEPS_KEPT = 200  # steps whose compute time is kept: what timing a compile needs, not a whole run's
UNCOUNTED = "step boundary"  # the profiler starting or writing its trace: measuring, not training
TAG = "vitals/time/{}"
DOMINANT = 0.5  # a share above this is said to dominate
RUNNER_ADVICE = 0.05  # runner's own work above this: log less often


class Stepped(Protocol):
    """Where the run stands (``TrainState``): its optimizer steps done."""

    step: int


@dataclass
class StepTimes:
    """Seconds per share since the last log step (``since_log``) and over the whole run (``total``).
    ``at_step``: called at each step boundary with the steps done, before the next window is read
    (the profiler starts and stops there; a delayed compile happens there)."""

    clock: Callable[[], float] = time.perf_counter
    since_log: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SHARES, 0.0))
    total: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SHARES, 0.0))
    step_compute: list[float] = field(default_factory=list)  # the first steps' compute seconds
    at_step: list[Callable[[int], None]] = field(default_factory=list)
    ranges: Ranges = field(default_factory=Ranges)
    phase: str = "runner"
    started: float | None = None
    compute_this_step: float = 0.0

    def now_in(self, phase: str) -> None:
        """The time from the last call to now belongs to the phase then current; from now on, to
        ``phase``: data, compute, validation, or runner's own (logging, checkpoint, ...)."""
        now = self.clock()
        if self.started is not None and self.phase != UNCOUNTED:
            share = PHASE_SHARE.get(self.phase, "runner")
            self.since_log[share] += now - self.started
            self.total[share] += now - self.started
            if share == "compute":
                self.compute_this_step += now - self.started
        self.phase, self.started = phase, now
        self.ranges.enter(phase)

    def waiting(self, windows: Iterable[Any], state: Stepped) -> Iterator[Any]:
        """``windows``, the time spent getting each counted as data; each step boundary announced."""
        iterator = iter(windows)
        while True:
            # What runs at the boundary (a trace written, a compile) is not the run's time; with nothing
            # there, the wait for data starts at once (one clock read fewer a step).
            boundary = bool(self.at_step)
            self.now_in(UNCOUNTED if boundary else "data")
            self.end_step()
            if boundary:
                for call in self.at_step:
                    call(state.step)
                self.now_in("data")
            try:
                window = next(iterator)
            except StopIteration:
                return
            self.now_in("compute")
            yield window

    def shares(self) -> dict[str, float]:
        """The shares since the last log step (summing to 1), as TensorBoard tags; from now on, runner's
        own work (the log step that called it)."""
        self.now_in("logging")
        spent, self.since_log = self.since_log, dict.fromkeys(SHARES, 0.0)
        return {TAG.format(name): value for name, value in fractions(spent).items()}

    def close(self) -> None:
        """The run's clock stops (its last phase counted) and any profiler range open ends."""
        self.now_in("runner")
        self.end_step()
        self.ranges.close()

    def end_step(self) -> None:
        if self.compute_this_step and len(self.step_compute) < STEPS_KEPT:
            self.step_compute.append(self.compute_this_step)
        self.compute_this_step = 0.0


class NoTimes(StepTimes):
    """Off: windows pass through untouched and nothing is timed (the baseline of
    scripts/bench_time_shares.py: what the shares cost)."""

    def now_in(self, phase: str) -> None:
        pass

    def waiting(self, windows: Iterable[Any], state: Stepped) -> Iterator[Any]:
        return iter(windows)

    def shares(self) -> dict[str, float]:
        return {}


def fractions(seconds: dict[str, float]) -> dict[str, float]:
    whole = sum(seconds.values())
    return {name: value / whole if whole > 0 else 0.0 for name, value in seconds.items()}


def summary(total: dict[str, float], num_workers: int | None, cpus: int | None = None) -> str:
    """The end-of-run line: the whole run's shares and, where one dominates, what to do about it."""
    shares = fractions(total)
    text = "time: " + ", ".join(f"{name} {100 * share:.1f}%" for name, share in shares.items())
    advice = []
    if shares["data"] > DOMINANT:
        cpus = cpus or os.cpu_count() or 1
        now = f"now {num_workers}" if num_workers is not None else "the loader's worker processes"
        advice.append(
            f"waiting for data most of the time: raise data.num_workers ({now}; this machine has {cpus} "
            "CPUs), or make the data set's __getitem__ cheaper"
        )
    if shares["validation"] > DOMINANT:
        advice.append(
            "validating most of the time: validate less often (trainer.val_every_n_steps, "
            "trainer.val_every_n_epochs) or on a smaller validation set"
        )
    if shares["runner"] > RUNNER_ADVICE:
        advice.append(
            f"runner's own work (logging, checkpoints) above {100 * RUNNER_ADVICE:.0f}%: log less often "
            "(trainer.log_every_n_steps), save less often (checkpoint.every_n_steps)"
        )
    return text + ("; " + "; ".join(advice) if advice else "")
