"""Checkpoint policy: when to save, what to keep. The engine calls it at fixed points; it decides."""

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.checkpoints import atomic_save
from runner.engine import TrainState

log = logging.getLogger("runner")
PERIODIC_NAME = re.compile(r"step_(\d+)\.pt")


@dataclass
class PeriodicCheckpointer:
    """Periodic ``step_<N>.pt`` files (the newest ``keep_last`` kept), ``best.pt`` when the monitored
    metric improves, and ``last.pt`` at the end or on interruption."""

    folder: Path
    payload: Callable[[TrainState], dict[str, Any]]  # builds the checkpoint dict from the live run
    every_n_steps: int | None
    every_n_epochs: int | None
    keep_last: int
    save_best: bool
    save_seconds: list[float] = field(default_factory=list)  # the loop's pause per save
    last_saved_step: int | None = None

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def after_step(self, state: TrainState) -> None:
        if self.every_n_steps and state.step % self.every_n_steps == 0:
            self.save_periodic(state)

    def after_epoch(self, state: TrainState) -> None:
        if self.every_n_epochs and state.epoch % self.every_n_epochs == 0:
            self.save_periodic(state)

    def after_validation(self, state: TrainState, improved: bool) -> None:
        if self.save_best and improved:
            self.save(state, "best.pt")

    def save_last(self, state: TrainState) -> Path:
        return self.save(state, "last.pt")

    def save_periodic(self, state: TrainState) -> None:
        if self.last_saved_step == state.step:
            return
        self.save(state, f"step_{state.step:08d}.pt")
        self.last_saved_step = state.step
        self.prune()

    def save(self, state: TrainState, name: str) -> Path:
        started = time.perf_counter()
        path = self.folder / name
        atomic_save(self.payload(state), path)
        self.save_seconds.append(time.perf_counter() - started)
        return path

    def prune(self) -> None:
        """Only after the new file is safely in place: drop all but the newest ``keep_last``."""
        periodic = sorted(
            (int(match.group(1)), path)
            for path in self.folder.iterdir()
            if (match := PERIODIC_NAME.fullmatch(path.name))
        )
        for _, path in periodic[: -self.keep_last]:
            path.unlink(missing_ok=True)
