"""What the console shows, and what only the run's log file (Hydra's ``train.log``) holds.

A single run shows on the console everything it logs. A sweep job shows one line at its start and one
at its end, and its warnings and errors, each marked ``[job N]``: jobs may run in parallel and share
the console. Everything else (the run plan, the per-validation lines) goes to the job's train.log only.
While a progress bar is drawn, console lines are written above it (the bar is cleared and redrawn)."""

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger("runner")

# ``log.info(..., extra=ON_CONSOLE)``: a line a sweep job shows on the console too (its start and end).
ON_CONSOLE = {"console": True}
# ``log.error(..., extra=IN_LOG_FILE_ONLY)``: a line a sweep job keeps to its train.log (its end line
# says it shorter).
IN_LOG_FILE_ONLY = {"console": False}

# What the running job's console takes (see sweep_job_console), and whether a bar is on the terminal.
_bar = {"allowed": True, "kept": True, "drawn": False}


def console_handlers() -> list[logging.StreamHandler]:
    """The root logger's handlers that write to a stream rather than a file (Hydra's ``console``)."""
    return [
        handler
        for handler in logging.getLogger().handlers
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
    ]


def bar_wanted() -> bool:
    """A bar only where a person watches one process: both streams on a terminal (a bar in a piped
    or redirected stream is noise), rank 0 of a distributed run, not a job of a parallel sweep."""
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    return on_terminal and _bar["allowed"] and int(os.environ.get("RANK", 0)) == 0


def bar_is_drawn() -> bool:
    """Whether a progress bar is on the terminal now: a line written straight to it starts below."""
    return _bar["drawn"]


def set_bar_drawn(drawn: bool) -> None:
    _bar["drawn"] = drawn


def bar_kept() -> bool:
    """Whether the bar's final state stays on the terminal: a sweep job's is cleared, so the console
    keeps one start and one end line per job."""
    return _bar["kept"]


class SweepJobFilter(logging.Filter):
    """A sweep job's console: warnings and errors, and the lines marked ``ON_CONSOLE``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, "console", record.levelno >= logging.WARNING))


class JobPrefix(logging.Formatter):
    """Formats as ``inner`` does, the message led by ``[job N]``: which job of a sweep said it."""

    def __init__(self, inner: logging.Formatter | None, number: int) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()
        self.prefix = f"[job {number}] "

    def format(self, record: logging.LogRecord) -> str:
        shown = logging.makeLogRecord(record.__dict__)  # the file handler formats the record unmarked
        shown.msg, shown.args = self.prefix + record.getMessage(), None
        return self.inner.format(shown)


@contextmanager
def sweep_job_console(number: int, bar: bool) -> Iterator[None]:
    """For one sweep job: its console lines filtered and marked (see the module's docstring); a
    progress bar only if ``bar`` (jobs run one at a time in this process), cleared at the job's end.
    The handlers are restored after: Hydra logs the sweep's summary through them."""
    handlers = console_handlers()
    saved = [(handler, handler.formatter) for handler in handlers]
    only_some = SweepJobFilter()
    for handler in handlers:
        handler.addFilter(only_some)
        handler.setFormatter(JobPrefix(handler.formatter, number))
    _bar.update(allowed=bar, kept=False)
    try:
        yield
    finally:
        _bar.update(allowed=True, kept=True)
        for handler, formatter in saved:
            handler.removeFilter(only_some)
            handler.setFormatter(formatter)


def to_log_file(level: int, message: str) -> None:
    """A line for the run's log file only: the console shows the same news its own way (the one-line
    error ``runner: error: ...``)."""
    record = log.makeRecord(log.name, level, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


class OneLinePerJob(logging.Filter):
    """For Hydra's launcher of jobs in this process: each job's start is runner's ``[job N] started``
    line (the swept settings only), so Hydra's ``#N : <every override>`` line goes; and its "Launching
    N jobs locally" is said once, not again before each trial of a search (launched one at a time)."""

    def __init__(self) -> None:
        super().__init__()
        self.launched = False

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.lstrip().startswith("#") and " : " in message:
            return False
        if message.startswith("Launching "):
            said, self.launched = self.launched, True
            return not said
        return True


def job_started(overrides: str) -> None:
    """A sweep job's first console line: what it runs (the overrides it is swept with)."""
    log.info("started: %s", overrides, extra=ON_CONSOLE)


def job_ended(status: str, seconds: float, detail: str, level: int = logging.INFO) -> None:
    """A sweep job's last console line: how it ended (ok, failed, ...), after how long, and its
    monitored value or its error."""
    log.log(level, "%s in %s: %s", status, duration(seconds), detail, extra=ON_CONSOLE)


def on_console_only(level: int, message: str) -> None:
    """A line for the console alone (a sweep job's, marked): not for any log file, as for a job that
    finished in an earlier run of its sweep, whose train.log stays as that run left it."""
    record = log.makeRecord(log.name, level, __file__, 0, message, None, None, extra=ON_CONSOLE)
    for handler in console_handlers():
        if record.levelno >= handler.level:
            handler.handle(record)


def duration(seconds: float) -> str:
    """``12.3 s`` under a minute, else ``4:05`` or ``1:04:05``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def shown_path(path: Path) -> str:
    """Relative to the working directory when under it: shorter on the console."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class AboveBars:
    """A terminal stream whose writes appear above tqdm's bars: they are cleared, the text written,
    and they are drawn again below it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):
            written = self.stream.write(text)
            self.stream.flush()
        return written

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def lines_above_bars() -> Iterator[None]:
    """While a bar is drawn, the console handlers that write to a terminal write above it: a log line
    does not break the bar, and is shown once."""
    swapped = []
    for handler in console_handlers():
        stream = handler.stream
        if getattr(stream, "isatty", lambda: False)():
            handler.setStream(AboveBars(stream))
            swapped.append((handler, stream))
    try:
        yield
    finally:
        for handler, stream in swapped:
            handler.setStream(stream)
