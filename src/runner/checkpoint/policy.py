"""Checkpoint policy: when to save, what to keep. The engine calls it at fixed points; it decides.

Saving pauses the loop only to copy the state, into buffers kept from save to save (``staging.py``:
pinned, and on a copy stream of its own, on a GPU); the file is written by a background thread. Saves
of one moment (best.pt and step_N.pt) share one copy, so memory holds one extra copy of the state. A
new copy waits for the previous writes (they read those buffers), and a save that waits half a second
or more says so, once. A write that fails (a full disk) is kept and raised at the next save or at
close; ``failure()`` tells the loop without waiting.
"""

import copy
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from runner.checkpoint.durable import remove_stale_temporaries, writing
from runner.checkpoint.files import atomic_save
from runner.checkpoint.staging import Staged, Staging
from runner.checkpoint.state import TrainState

log = logging.getLogger("runner")
PERIODIC_NAME = re.compile(r"step_(\d+)\.pt")
WAIT_WORTH_SAYING = 0.5  # seconds a save waits for the previous write before it says so


def snapshot(value: Any) -> Any:
    """A copy that training can no longer change: every tensor cloned to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(snapshot(item) for item in value)
    return value


class Checkpointer(Protocol):
    """Decides by itself when to save; the loop calls it at fixed points."""

    save_seconds: list[float]  # the loop's pause per save
    last_written: Path | None  # the newest checkpoint this run wrote completely

    def saves_at(self, state: TrainState, epoch_ended: bool) -> bool: ...
    def after_step(self, state: TrainState) -> None: ...
    def after_epoch(self, state: TrainState) -> None: ...
    def after_validation(self, state: TrainState, improved: bool) -> None: ...
    def save_last(self, state: TrainState) -> Path | None: ...
    def failure(self) -> BaseException | None: ...
    def close(self) -> None: ...


class NoCheckpoints:
    """``checkpoint.enabled=false`` (and ranks other than 0): every call does nothing."""

    save_seconds: list[float] = []  # noqa: RUF012 (never appended to)
    last_written: Path | None = None

    def save_last(self, state: TrainState) -> None:
        return None

    def failure(self) -> BaseException | None:
        return None

    def saves_at(self, state: TrainState, epoch_ended: bool) -> bool:
        return False

    def after_step(self, state: TrainState) -> None:
        pass

    def after_epoch(self, state: TrainState) -> None:
        pass

    def after_validation(self, state: TrainState, improved: bool) -> None:
        pass

    def close(self) -> None:
        pass


def stale_periodic(folder: Path, pattern: re.Pattern, keep: Path, keep_last: int) -> list[Path]:
    """The periodic checkpoints (``step_<N>``) to remove so that the newest ``keep_last`` stay, ``keep``
    (the one just written) always among them: a resume from an older step may find higher numbers."""
    periodic = sorted(
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if (match := pattern.fullmatch(path.name)) and path != keep
    )
    return [path for _, path in periodic[: max(len(periodic) - (keep_last - 1), 0)]]


class SaveCadence:
    """When to save and under which name, for checkpoints of either format: ``step_<N>`` every so many
    steps or epochs, ``best`` when the monitored metric improves, ``last`` at the end. A format gives
    ``suffix`` and ``save``/``wait``, and the fields used here."""

    suffix = ".pt"
    every_n_steps: int | None
    every_n_epochs: int | None
    save_best: bool
    last_saved_step: int | None

    def save(self, state: TrainState, name: str, prune: bool = False) -> Path: ...
    def wait(self) -> None: ...

    def saves_at(self, state: TrainState, epoch_ended: bool) -> bool:
        """Whether ``after_step`` or ``after_epoch`` saves now (the non-finite guard reads its norms
        first); a validation's ``best`` is not counted here (validation reads them itself)."""
        return self._step_due(state) or (epoch_ended and self._epoch_due(state))

    def _step_due(self, state: TrainState) -> bool:
        return bool(self.every_n_steps) and state.step % self.every_n_steps == 0

    def _epoch_due(self, state: TrainState) -> bool:
        return bool(self.every_n_epochs) and state.epoch % self.every_n_epochs == 0

    def after_step(self, state: TrainState) -> None:
        if self._step_due(state):
            self.save_periodic(state)

    def after_epoch(self, state: TrainState) -> None:
        if self._epoch_due(state):
            self.save_periodic(state)

    def after_validation(self, state: TrainState, improved: bool) -> None:
        if self.save_best and improved:
            self.save(state, f"best{self.suffix}")

    def save_last(self, state: TrainState) -> Path:
        """Written before returning: the run is about to end."""
        path = self.save(state, f"last{self.suffix}")
        self.wait()
        return path

    def save_periodic(self, state: TrainState) -> None:
        if self.last_saved_step == state.step:
            return
        self.save(state, f"step_{state.step:08d}{self.suffix}", prune=True)
        self.last_saved_step = state.step


@dataclass
class PeriodicCheckpointer(SaveCadence):
    """Periodic ``step_<N>.pt`` files (the newest ``keep_last`` kept), ``best.pt`` when the monitored
    metric improves, and ``last.pt`` at the end or on interruption."""

    folder: Path
    payload: Callable[[TrainState], dict[str, Any]]  # builds the checkpoint dict from the live run
    every_n_steps: int | None
    every_n_epochs: int | None
    keep_last: int
    save_best: bool
    # Makes the metrics logged so far durable first: a checkpoint never outlives its step's logs.
    before_save: Callable[[], None] = lambda: None
    save_seconds: list[float] = field(default_factory=list)  # the loop's pause per save
    write_seconds: list[float] = field(default_factory=list)  # each background write
    last_saved_step: int | None = None
    last_written: Path | None = None  # set by the background thread once a file is in place
    _writer: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    _in_flight: list[Future] = field(default_factory=list)
    _staging: Staging = field(default_factory=Staging)
    _snapshot: Staged = field(default_factory=lambda: Staged({}))
    _snapshot_of: TrainState | None = None
    _failure: BaseException | None = None
    _said_it_waits: bool = False

    def __post_init__(self) -> None:
        """The run starts writing here: what an earlier process killed mid-save left is removed."""
        with writing(self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(self.folder)

    def save(self, state: TrainState, name: str, prune: bool = False) -> Path:
        started = time.perf_counter()
        if state != self._snapshot_of:  # best.pt and step_N.pt of one moment share one copy
            self.before_save()
            self.wait_for_the_writes(state)
            self._snapshot = self._staging.copy(self.payload(state))
            self._snapshot_of = copy.deepcopy(state)
        path = self.folder / name
        self._in_flight.append(self._writer.submit(self._write, self._snapshot, path, prune))
        self.save_seconds.append(time.perf_counter() - started)
        return path

    def wait_for_the_writes(self, state: TrainState) -> None:
        """Before a new copy: the previous writes read the buffers it fills. A wait long enough to matter
        (the loop pauses for it) is said once per run, with the fix."""
        started = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - started
        if waited >= WAIT_WORTH_SAYING and not self._said_it_waits:
            self._said_it_waits = True
            log.warning(
                "checkpoint: the save at step %d waited %.1f s for the previous one's write to end (the "
                "loop paused meanwhile); save less often (checkpoint.every_n_steps) or to a faster disk "
                "(said once)",
                state.step,
                waited,
            )

    def close(self) -> None:
        """However the run ends (an error included), the saves already begun are finished."""
        try:
            self.wait()
        finally:
            self._writer.shutdown()

    def wait(self) -> None:
        """Finish the saves in flight; a failed write (a full disk: a ``WriteError``) is raised here."""
        in_flight, self._in_flight = self._in_flight, []
        for future in in_flight:
            future.result()

    def failure(self) -> BaseException | None:
        """The error of a save that has already failed; saves still running are not waited for."""
        return self._failure

    def _write(self, staged: Staged, path: Path, prune: bool) -> None:
        started = time.perf_counter()
        try:
            staged.ready()  # a GPU's part copied (its own stream)
            with writing(path):
                atomic_save(staged.value, path)
            self.last_written = path
            if prune:
                with writing(self.folder):
                    self.prune(keep=path)
        except BaseException as error:
            self._failure = error
            raise
        self.write_seconds.append(time.perf_counter() - started)

    def prune(self, keep: Path) -> None:
        """Only after ``keep`` (the new file) is safely in place."""
        for path in stale_periodic(self.folder, PERIODIC_NAME, keep, self.keep_last):
            path.unlink(missing_ok=True)
