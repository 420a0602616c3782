"""SIGTERM or SIGINT to a sweep whose jobs run in worker processes on this machine (Hydra's joblib
launcher). Left to its default, the signal ends the sweep process alone: no summary, its workers
training on as orphans, joblib's folders and semaphores left in /dev/shm.

Instead the sweep process passes SIGTERM on to each worker that has runner's handler (a worker that has
started a job; checked in ``/proc``, so an idle worker, which the signal would kill, is left alone, and
one that starts a job later is told then). A running job saves at its next step boundary and ends as
stopped; a worker that was told runs none of its later jobs. joblib then returns as usual, Hydra writes
the summary, and the sweep exits 128 + the signal number. A second SIGINT aborts at once.

Reading another process's signal handlers and children needs Linux's ``/proc``; elsewhere no worker is
told, and the sweep ends once its running jobs have (the summary is still written)."""

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from runner.observe.console import shown_path

received: list[int] = []  # the signal that stopped the sweep, once one has
sweep_dir: list[Path] = []
_previous: dict[int, Any] = {}
_done = threading.Event()


def children() -> list[int]:
    """This process's child processes (Linux); none where ``/proc`` cannot say."""
    found: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            found += [int(pid) for pid in task.read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``SigCgt`` in ``/proc/<pid>/status``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def tell_workers() -> None:
    """SIGTERM, once, to each worker that takes it, until the sweep ends (workers start jobs later)."""
    told: set[int] = set()
    while not _done.is_set():
        for pid in children():
            if pid not in told and catches_sigterm(pid):
                told.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        _done.wait(0.2)


def handle(number: int, frame: FrameType | None) -> None:
    if received and received[0] == signal.SIGINT and number == signal.SIGINT:
        raise KeyboardInterrupt
    if received:
        return
    received.append(number)
    name = signal.Signals(number).name
    message = f"runner: {name} received: the sweep stops; running jobs save at their next step\n"
    os.write(2, message.encode())
    threading.Thread(target=tell_workers, name="tell-workers", daemon=True).start()


def watch(directory: Path) -> None:
    """From the start of a sweep whose jobs run in worker processes, in the sweep process."""
    sweep_dir[:] = [directory]
    received.clear()
    _done.clear()
    for number in (signal.SIGTERM, signal.SIGINT):
        _previous[number] = signal.signal(number, handle)


def unwatch() -> None:
    _done.set()
    for number, handler in _previous.items():
        signal.signal(number, handler)
    _previous.clear()


def report() -> NoReturn:
    """How a sweep whose jobs ran in worker processes ended when a signal stopped it."""
    from runner.search import trials_not_run

    number = received[0]
    not_run = "; ".join(["jobs not started", *trials_not_run])
    print(f"runner: the sweep was stopped by {signal.Signals(number).name}: the running jobs saved their "
          f"checkpoints; not run: {not_run}; the summary covers the jobs that ran; to continue the sweep, "
          f"run the same command with hydra.sweep.dir={shown_path(sweep_dir[0])}",
          file=sys.stderr)  # fmt: skip
    raise SystemExit(128 + number)
