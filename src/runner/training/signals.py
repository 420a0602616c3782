"""Preemption: SIGTERM, SIGINT, or a cluster's preemption signal asks the run to stop at the next
optimizer-step boundary, after which it saves ``last.pt`` and exits.

Inside a submitit job (SLURM, or submitit's local executor) submitit sends its preemption signal
(SIGUSR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise) before a timeout or on preemption, and its
own handler requeues the job and exits. Runner takes that signal first, saves, and then hands it to
submitit's handler, so the requeued job finds the checkpoint in its own directory and continues.
"""

import os
import signal
import threading
from types import FrameType

from runner.observe.console import bar_is_drawn
from runner.training.distributed import any_process, in_submitit_job


def preemption_signal() -> signal.Signals | None:
    """The signal submitit sends before a timeout or on preemption; None outside a submitit job."""
    if not in_submitit_job():
        return None
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)


# A stop asked for before a run took its signals (a sweep's handler, between jobs or while a job
# starts): the next run stops at its first step boundary.
_pending: list[int] = []


def stop_before_start(number: int) -> None:
    _pending.append(number)


class GracefulStop:
    """While active, the first stop signal only sets ``signal_number``; the loop saves and exits at
    the next step boundary. A second SIGINT aborts at once."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self._previous: dict[int, object] = {}
        self._preemption = preemption_signal()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.signal_number == signal.SIGINT and number == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signal_number is None:
            self.signal_number = number
            name = signal.Signals(number).name
            then = "handing over to submitit (requeue)" if number == self._preemption else "exiting"
            below_bar = "\n" if bar_is_drawn() else ""  # a progress bar's line has no newline yet
            os.write(
                2,
                f"{below_bar}runner: {name} received: saving at the next step boundary, then {then} "
                "(Ctrl-C again aborts at once)\n".encode(),
            )

    def requested(self) -> int | None:
        """The signal to stop for, agreed by every process (checked at each step boundary)."""
        return any_process(self.signal_number or 0) or None

    def __enter__(self) -> "GracefulStop":
        numbers = [signal.SIGTERM, signal.SIGINT] + ([self._preemption] if self._preemption else [])
        # Only the main thread takes signals: a run in another (runner.train from a thread) leaves them
        # to the program's own handlers, and stops at the end of its steps or with the program.
        for number in numbers if threading.current_thread() is threading.main_thread() else []:
            self._previous[number] = signal.signal(number, self._handle)
        if _pending:
            self.signal_number = _pending.pop()
            _pending.clear()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def exit_for(self, number: int) -> None:
        """After the save: the preemption signal goes on to the handler it was meant for (submitit's
        requeue-and-exit); anything else exits with the shell's status for a signal, 128 + number."""
        handler = self._previous.get(number)
        if number == self._preemption and callable(handler):
            handler(number, None)
        raise SystemExit(128 + number)
