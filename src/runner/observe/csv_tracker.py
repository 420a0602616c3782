"""``logger=[csv]``: the run's scalars in ``metrics.csv`` in its directory, one row per value
(``step,tag,value,wall_time``), for a spreadsheet or ``pandas.read_csv(...).pivot(index="step",
columns="tag", values="value")``. The config and the result are beside it already (``run.yaml``,
``result.json``)."""

import csv
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from runner.checkpoint.durable import writing
from runner.config.bounded_read import UnreadableFile, open_plain
from runner.config.errors import UserError

CSV_FILE = "metrics.csv"
COLUMNS = ("step", "tag", "value", "wall_time")
MAX_ROW = 1 << 16  # a row runner writes is under 200 bytes; the search for rows to drop stops at a longer one


class CsvTracker:
    """Rows appended as they are logged. A resumed run first drops the rows past its checkpoint's step:
    they belong to the lost future of the interrupted run (as TensorBoard drops its events). They are
    the file's last rows (steps only grow in it), so the file is cut where they start, read from its
    end: the work is that of the dropped rows, however large the file grew."""

    name = "csv"

    def __init__(self, start: Any) -> None:
        self.path: Path = start.run_dir / CSV_FILE
        self.record: dict[str, Any] = {"file": CSV_FILE}
        with writing(self.path):
            try:  # a FIFO in its place would block a plain open; a folder is refused
                descriptor = open_plain(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            except (UnreadableFile, OSError) as error:
                why = error.strerror if isinstance(error, OSError) else str(error)
                raise UserError(
                    f"logger=csv: cannot write {self.path}: {why}; move it away and run again"
                ) from None
            if start.resumed_at is not None:
                drop_rows_past(descriptor, start.resumed_at)
            size = os.fstat(descriptor).st_size
            ends_a_line = size == 0 or os.pread(descriptor, 1, size - 1) == b"\n"
            self._handle = os.fdopen(descriptor, "a", newline="")
            self._writer = csv.writer(self._handle)
            if size == 0:
                self._writer.writerow(COLUMNS)
            elif not ends_a_line:  # a row cut short: the next one starts on a line of its own
                self._handle.write("\r\n")
            self._handle.flush()

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        now = round(time.time(), 3)
        with writing(self.path):
            self._writer.writerows((step, tag, repr(float(value)), now) for tag, value in scalars.items())
            self._handle.flush()

    def log_text(self, tag: str, text: str) -> None:
        pass  # the run plan is in train.log and TensorBoard's text tab

    def finish(self, status: str, result: Mapping[str, Any]) -> None:
        pass  # result.json holds it

    def close(self) -> None:
        self._handle.close()


def drop_rows_past(descriptor: int, last_step: int) -> None:
    """Cut the file at its first row of the rows past ``last_step`` that end it."""
    size = os.fstat(descriptor).st_size
    cut = size
    for offset, line in lines_from_end(descriptor, size):
        step = line.split(b",", 1)[0].strip()
        if line.strip() and not (step.isdigit() and len(step) <= 18 and int(step) > last_step):
            break
        cut = offset
    if cut < size:
        os.ftruncate(descriptor, cut)


def lines_from_end(descriptor: int, size: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` for each line of the file's first ``size`` bytes, the last first, read
    backwards in blocks; it ends early at a line longer than ``MAX_ROW``."""
    buffer, low, stop = b"", size, 0  # buffer holds bytes [low, low + len(buffer)); lines left: [:stop]
    while low + stop > 0:
        newline = buffer.rfind(b"\n", 0, stop - 1) if stop > 0 else -1
        while newline < 0 and low > 0:
            if stop > MAX_ROW:
                return
            read = min(1 << 16, low)
            low -= read
            buffer, stop = os.pread(descriptor, read, low) + buffer[:stop], stop + read
            newline = buffer.rfind(b"\n", 0, stop - 1)
        if stop > MAX_ROW and newline < stop - MAX_ROW:
            return
        yield low + newline + 1, buffer[newline + 1 : stop]
        stop = newline + 1
