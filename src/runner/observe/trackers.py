"""Experiment trackers beside TensorBoard (``logger=[tensorboard,mlflow,wandb,csv]``).

TensorBoard's event files are always written: they are runner's own record of a run (``runner report``,
sweep summaries and ``runner doctor`` read them). Each tracker the config names gets the same calls the
event file gets, the same scalars at the same steps, handed over to one writer thread, so a slow tracker
(a server across the network) costs the training loop a queue put. ``flush`` (before every checkpoint
save, and at the end) waits until every tracker has them.

A tracker that fails (a server that went away) is dropped with one warning: the run goes on, and its
numbers are still in the event file. So are the trackers when a call of theirs has not returned within
``ANSWER_SECONDS`` (a server that stopped answering, whose client retries for minutes). Which
tracker run a run directory logs to is kept in ``trackers.json`` beside it, so a resumed run continues
the same one.
"""

import importlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.checkpoint.durable import write_text, writing
from runner.config.bounded_read import UnreadableFile, read_bounded
from runner.config.errors import UserError
from runner.config.trackers import TRACKERS
from runner.observe.writer import MetricLogger

log = logging.getLogger("runner")
TRACKERS_FILE = "trackers.json"
# How long one tracker call may take before the trackers are left out: MLflow's client retries a
# server that went away for about four minutes.
ANSWER_SECONDS = 10.0
SWEEP_MARK = "multirun.yaml"  # Hydra writes it into a sweep's directory before the first job starts


class Tracker(Protocol):
    """One experiment tracker's run: what the loop logs, and how the run ended."""

    name: str

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None: ...
    def log_text(self, tag: str, text: str) -> None: ...
    def finish(self, status: str, result: Mapping[str, Any]) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class TrackerStart:
    """What a tracker is opened with: where the run writes, its settings, and whether it continues."""

    run_dir: Path
    hparams: dict[str, float | str | bool]  # the whole config, flattened (hparams.hparams_of)
    settings: Any  # the config's section of the tracker (config.mlflow, config.wandb), or None
    resumed_at: int | None  # the checkpoint's step a resumed run continues from; None for a new run
    earlier: dict[str, Any]  # what this run directory's trackers.json says of the tracker

    @property
    def sweep_dir(self) -> Path | None:
        """The sweep directory of a sweep's job; None for a single run."""
        parent = self.run_dir.resolve().parent
        return parent if (parent / SWEEP_MARK).is_file() else None


def recorded_trackers(run_dir: Path) -> dict[str, Any]:
    """This run directory's ``trackers.json``: each tracker's run id (and where it is); empty if none."""
    path = run_dir / TRACKERS_FILE
    try:
        recorded = json.loads(read_bounded(path))
    except FileNotFoundError:
        return {}
    except UnreadableFile as error:
        raise UserError(
            f"cannot continue the trackers' runs: {path}: {error}; move it away (the trackers then start "
            "new runs) and resume again"
        ) from None
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {name: record for name, record in recorded.items() if isinstance(record, dict)}  # forged: none


def open_trackers(
    names: list[str], run_dir: Path, hparams: dict[str, float | str | bool], settings: Any,
    resumed_at: int | None,
) -> list[Tracker]:  # fmt: skip
    """The trackers ``names`` asks for besides TensorBoard, each with its run started (or continued)
    and the config logged. A tracker that cannot start is a ``UserError`` naming it: before training."""
    wanted = [name for name in names if TRACKERS[name].opens is not None]  # TensorBoard: the event file
    earlier = recorded_trackers(run_dir) if resumed_at is not None and wanted else {}
    opened: list[Tracker] = []
    try:
        for name in wanted:
            section = getattr(settings, name, None)
            start = TrackerStart(run_dir, hparams, section, resumed_at, earlier.get(name, {}))
            opened.append(tracker_class(name)(start))
    except BaseException:
        for tracker in opened:
            tracker.close()
        raise
    ids = {tracker.name: getattr(tracker, "record", {}) for tracker in opened}
    if ids:
        with writing(run_dir / TRACKERS_FILE):
            write_text(run_dir / TRACKERS_FILE, json.dumps({**earlier, **ids}, indent=2))
    return opened


def tracker_class(name: str) -> Callable[[TrackerStart], Tracker]:
    """The class the registry's entry names for ``name``, imported now: only a run that names it pays
    for its library's import."""
    module, _, attribute = str(TRACKERS[name].opens).partition(":")
    return getattr(importlib.import_module(module), attribute)


class Trackers:
    """The trackers a run logs to besides its event file, each call handed on to them, in order, on one
    thread of their own. A tracker call that has not returned after ``answer_seconds`` (a tracking server
    that died: its client retries for minutes) no longer holds the run up: waiting for the trackers stops,
    and they are left out, with one warning. At the run's end, that call is waited out as long as its
    client's limits allow (a tracker's ``longest_call_seconds``), so that nothing of the run goes on
    after it (retrying, logging into the next run's log). None asked for (``Trackers()``): every call
    does nothing."""

    def __init__(self, trackers: list[Tracker] | None = None, answer_seconds: float = ANSWER_SECONDS) -> None:
        self.trackers, self.answer_seconds = list(trackers or []), answer_seconds
        self._calls: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue()
        self._calling: tuple[Tracker, float] | None = None  # the tracker being called, since when (monotonic)
        self._stuck_until: float | None = None  # when the call left out ends at the latest, if known
        self._thread = threading.Thread(target=self._run, name="trackers", daemon=True)
        self._closed = self._finished = False
        self._left_out = not self.trackers  # nothing to hand on to
        if self.trackers:
            self._thread.start()

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            method, args = call
            if method == "reached":
                args[0].set()
                continue
            for tracker in list(self.trackers):
                self._calling = (tracker, time.monotonic())
                try:
                    getattr(tracker, method)(*args)
                except Exception as error:
                    if tracker in self.trackers:
                        self.trackers.remove(tracker)
                        log.warning(
                            "logger %s failed and is left out for the rest of the run (its numbers are in "
                            "TensorBoard's event files): %s: %s", tracker.name, type(error).__name__, error,
                        )  # fmt: skip
                finally:
                    self._calling = None

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        if not self._left_out:
            self._calls.put(("log_scalars", (step, dict(scalars))))

    def log_text(self, tag: str, text: str) -> None:
        if not self._left_out:
            self._calls.put(("log_text", (tag, text)))

    def finish(self, status: str, result: Mapping[str, Any]) -> None:
        """How the run ended (``ok``, ``failed``, ``stopped``: to be resumed) and its result: the
        monitored metric's best value and step. Once: later calls do nothing."""
        if self._finished or self._closed:
            return
        self._finished = True
        if not self._left_out:
            self._calls.put(("finish", (status, dict(result))))
        self.flush()

    def flush(self) -> None:
        """Until the trackers have every call made so far, or one call has taken ``answer_seconds``."""
        if self._left_out:
            return
        reached = threading.Event()
        self._calls.put(("reached", (reached,)))
        while not reached.wait(min(1.0, self.answer_seconds)):
            calling = self._calling
            if calling is not None and time.monotonic() - calling[1] > self.answer_seconds:
                self._leave_out(*calling)
                return

    def _leave_out(self, stuck: Tracker, since: float) -> None:
        self._left_out, name = True, stuck.name
        longest = getattr(stuck, "longest_call_seconds", None)  # None: no limit known
        self._stuck_until = None if longest is None else since + longest
        others = "".join(f", with {tracker.name}" for tracker in self.trackers if tracker.name != name)
        self.trackers.clear()
        log.warning(
            "logger %s did not answer within %g s and is left out for the rest of the run%s (the numbers are "
            "in TensorBoard's event files)", name, self.answer_seconds, others,
        )  # fmt: skip

    def close(self) -> None:
        """The trackers' runs closed (as failed, if the run did not say how it ended). Once."""
        if self._closed:
            return
        self.finish("failed", {})
        self._closed = True
        if self._thread.is_alive():
            self._calls.put(("close", ()))
            self.flush()
            self._calls.put(None)
            self._thread.join(self._stuck_call_left() if self._left_out else None)

    def _stuck_call_left(self) -> float:
        """How long the call left out may still take under its client's limits (0: unknown)."""
        left = 0.0 if self._stuck_until is None else self._stuck_until - time.monotonic()
        if left > 0:
            log.info("trackers: waiting up to %.0f s for the call left out to end (its client's limits), so "
                     "that nothing of this run goes on after it", left)  # fmt: skip
        return max(left, 0.0)


@dataclass
class Loggers:
    """A :class:`MetricLogger` that writes the event file (``main``) and hands every call on to the
    trackers beside it."""

    main: MetricLogger
    trackers: Trackers

    @property
    def error(self) -> BaseException | None:  # the event file's: a run stops only for its own record
        return self.main.error

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        self.main.log_scalars(step, scalars)
        self.trackers.log_scalars(step, scalars)

    def log_text(self, tag: str, text: str) -> None:
        self.main.log_text(tag, text)
        self.trackers.log_text(tag, text)

    def flush(self) -> None:
        self.main.flush()
        self.trackers.flush()

    def close(self) -> None:
        """The trackers' runs closed, then the event file (which raises a write that failed)."""
        self.trackers.close()
        self.main.close()
