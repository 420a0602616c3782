"""Where numbers go: TensorBoard event files in the run directory.

The engine reads its numbers off the device in one go at log time (``training.device.to_floats``) and
hands them here as floats.
"""

import contextlib
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary

from runner.checkpoint.durable import writing
from runner.observe.events import text_summary, tf_record

log = logging.getLogger("runner")
FILE_NUMBERS = itertools.count()  # tells apart the event files one process opens in one second


class MetricLogger(Protocol):
    """What the loop logs to: :class:`TensorBoardLogger`, or :class:`NullLogger` where nothing is written."""

    error: BaseException | None  # a failed write: the run stops at its next step boundary

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None: ...
    def log_text(self, tag: str, text: str) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class TensorBoardLogger:
    """Scalars and text of one run, in one real TensorBoard event file.

    A logged step costs the loop one list append: events are handed to the writer thread in batches
    (every ``batch_seconds``, and on flush and close), which frames and writes them. TensorBoard's own
    writer hands over every event on its own, about 150 us a step on a 2-core CPU machine; that is more
    than the rest of a tiny model's step costs runner over a hand-written loop.

    A write that fails (a full disk) is cut back to the last whole record, so the file stays readable;
    later events are dropped, and the error is kept in ``error`` for the loop to act on at a step
    boundary (logging never raises mid-step). ``close`` raises it."""

    def __init__(self, log_dir: Path, purge_step: int | None = None, batch_seconds: float = 1.0) -> None:
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
            f".{next(FILE_NUMBERS)}"
        )
        self.path = log_dir / name
        with writing(self.path):
            log_dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._closed = False
        self._written = 0  # bytes of whole records in the file
        self.error: BaseException | None = None
        self._pending: list[Event] = []
        self._batch_seconds, self._handed_at = batch_seconds, time.monotonic()
        self._batches: queue.Queue[list[Event] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._write_batches, name="tensorboard-writer", daemon=True)
        self._thread.start()
        self._add(Event(file_version="brain.Event:2"))
        if purge_step is not None:
            # TensorBoard drops the events at and past this step that an earlier file of this run holds.
            self._add(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))
        self.flush()
        if self.error is not None:
            self.close()

    def _write_batches(self) -> None:
        while (batch := self._batches.get()) is not None:
            try:
                if self.error is None:
                    self._write(b"".join(tf_record(event.SerializeToString()) for event in batch))
            except BaseException as error:  # acted on by the loop at its next step boundary
                self.error = error
            finally:
                self._batches.task_done()
        self._batches.task_done()

    def _write(self, records: bytes) -> None:
        """All of ``records`` or none: a failed write is cut back to the last whole record."""
        try:
            with writing(self.path):
                view = memoryview(records)
                while view:
                    view = view[os.write(self._fd, view) :]
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._written)
                os.lseek(self._fd, self._written, os.SEEK_SET)
            raise
        self._written += len(records)

    def _add(self, event: Event) -> None:
        event.wall_time = event.wall_time or time.time()
        self._pending.append(event)
        if time.monotonic() - self._handed_at >= self._batch_seconds:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._pending and self.error is None:
            self._batches.put(self._pending)
        self._pending = []
        self._handed_at = time.monotonic()

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """All of a step's scalars as one event."""
        values = [Summary.Value(tag=tag, simple_value=float(number)) for tag, number in scalars.items()]
        self._add(Event(step=step, summary=Summary(value=values)))

    def log_text(self, tag: str, text: str) -> None:
        # Indented four spaces, TensorBoard's markdown shows the text as a code block, lines intact.
        self._add(Event(summary=text_summary(tag, "\n".join("    " + line for line in text.splitlines()))))

    def flush(self) -> None:
        """Everything logged so far is in the file when this returns, unless a write failed (``error``)."""
        self._hand_over()
        self._batches.join()

    def close(self) -> None:
        """Flush, stop the thread, close the file; then raise the write error, if there was one."""
        if not self._closed:
            self._closed = True
            try:
                self.flush()
            finally:
                self._batches.put(None)
                self._thread.join()
                os.close(self._fd)
        if self.error is not None:
            raise self.error


class NullLogger:
    """Logging off (ranks other than 0, tools that write nothing): every call does nothing."""

    error: BaseException | None = None

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        pass

    def log_text(self, tag: str, text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
