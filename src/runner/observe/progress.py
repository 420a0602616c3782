"""Progress: a tqdm bar on a terminal; one log line per validation, always (console and train.log)."""

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import TextIO

from runner.observe.console import bar_kept, bar_wanted, lines_above_bars, set_bar_drawn
from runner.observe.records import SAMPLES_PER_SEC

log = logging.getLogger("runner")
RATE_WINDOW_S = 10.0
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class RateWindow:
    """Steps and samples per second over the last ``seconds`` of wall time: long enough to even out
    the intervals that hold a validation or a checkpoint, short enough to follow a change of speed.
    It counts only the steps this process trained, so a resumed run's ETA is not skewed by the steps
    its checkpoint brought."""

    def __init__(self, now: float, step: int, seconds: float = RATE_WINDOW_S) -> None:
        self.seconds = seconds
        self.samples = 0.0
        self.points: deque[tuple[float, int, float]] = deque([(now, step, 0.0)])

    def add(self, now: float, step: int, samples: float) -> None:
        """``samples``: trained since the previous point. The oldest point kept is the newest one at
        least ``seconds`` old."""
        self.samples += samples
        self.points.append((now, step, self.samples))
        while len(self.points) > 2 and self.points[1][0] <= now - self.seconds:
            self.points.popleft()

    def _per_second(self, index: int) -> float | None:
        first, last = self.points[0], self.points[-1]
        span = last[0] - first[0]
        return (last[index] - first[index]) / span if span > 0 else None

    def steps_per_sec(self) -> float | None:
        return self._per_second(1)

    def samples_per_sec(self) -> float | None:
        return self._per_second(2)


def rounded(value: float) -> str:
    """A rate as a person reads it: thousands grouped, three significant digits below 100."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


class Progress:
    """A tqdm bar (see ``bar_wanted``), redrawn at log steps only: the per-step loop pays nothing.
    The per-validation lines are logged, so train.log holds them whether or not a bar is drawn.

    ``file``: draw the bar there, terminal or not (tests); ``clock``: seconds, for the rates."""

    def __init__(
        self,
        total_steps: int,
        initial_step: int = 0,
        file: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total_steps = total_steps
        self.clock = clock
        self.bar = None
        self.console = ExitStack()
        if file is None and not bar_wanted():
            return
        from tqdm import tqdm

        self.bar = tqdm(
            total=total_steps, initial=initial_step, file=file, unit="step", dynamic_ncols=True,
            leave=bar_kept(), bar_format=BAR_FORMAT,
        )  # fmt: skip
        self.window = RateWindow(clock(), initial_step)
        self.last_time = self.window.points[0][0]
        if file is None:
            self.console.enter_context(lines_above_bars())
            set_bar_drawn(True)
            self.console.callback(set_bar_drawn, False)

    def update(self, step: int, scalars: Mapping[str, float]) -> None:
        """At a log step. ``vitals/samples_per_sec`` covers the steps since the previous log step."""
        if self.bar is None:
            return
        now = self.clock()
        self.window.add(now, step, scalars[SAMPLES_PER_SEC] * (now - self.last_time))
        self.last_time = now
        self.bar.n = step
        self.bar.set_postfix_str(self.status(step, scalars), refresh=False)
        self.bar.refresh()

    def status(self, step: int, scalars: Mapping[str, float]) -> str:
        """ETA and samples/s over the rate window, and the step's loss and learning rate."""
        from tqdm import tqdm

        steps_per_sec, samples_per_sec = self.window.steps_per_sec(), self.window.samples_per_sec()
        eta = tqdm.format_interval((self.total_steps - step) / steps_per_sec) if steps_per_sec else "?"
        speed = f"{rounded(samples_per_sec)} samples/s" if samples_per_sec is not None else "? samples/s"
        return f"eta {eta}, {speed}, loss {scalars['train/loss']:.4g}, lr {scalars['train/lr']:.3g}"

    def report(self, epoch: int, step: int, metrics: Mapping[str, float | None]) -> None:
        line = f"epoch {epoch} step {step} | " + " | ".join(
            f"{name} {value:.4g}" for name, value in metrics.items() if value is not None
        )
        log.info(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.console.close()
