"""``logger=[csv]``: the run's scalars in ``metrics.csv`` in its directory, one row per value
(``step,tag,value,wall_time``), for a spreadsheet or ``pandas.read_csv(...).pivot(index="step",
columns="tag", values="value")``. The config and the result are beside it already (``run.yaml``,
``result.json``)."""

import csv
import io
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner.checkpoint.durable import write_text, writing

CSV_FILE = "metrics.csv"
COLUMNS = ("step", "tag", "value", "wall_time")


class CsvTracker:
    """Rows appended as they are logged. A resumed run first drops the rows past its checkpoint's step:
    they belong to the lost future of the interrupted run (as TensorBoard drops its events)."""

    name = "csv"

    def __init__(self, start: Any) -> None:
        self.path: Path = start.run_dir / CSV_FILE
        self.record: dict[str, Any] = {"file": CSV_FILE}
        with writing(self.path):
            if start.resumed_at is not None and self.path.is_file():
                write_text(self.path, kept_rows(self.path.read_text(), start.resumed_at))
            new = not self.path.is_file() or self.path.stat().st_size == 0
            self._handle = open(self.path, "a", newline="")  # noqa: SIM115 (open for the run)
            self._writer = csv.writer(self._handle)
            if new:
                self._writer.writerow(COLUMNS)
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


def kept_rows(text: str, last_step: int) -> str:
    """The rows of ``metrics.csv`` at steps up to ``last_step``, with the header."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""
    kept = [rows[0], *(row for row in rows[1:] if row and row[0].isdigit() and int(row[0]) <= last_step)]
    out = io.StringIO()
    csv.writer(out).writerows(kept)
    return out.getvalue()
