"""Preemption: SIGTERM or SIGINT asks the run to stop at the next optimizer-step boundary."""

import os
import signal
from types import FrameType

from runner.distributed import any_process


class GracefulStop:
    """While active, the first SIGTERM/SIGINT only sets ``signal_number``; the loop saves and
    exits at the next step boundary. A second SIGINT aborts at once."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.signal_number == signal.SIGINT and number == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signal_number is None:
            self.signal_number = number
            name = signal.Signals(number).name
            os.write(
                2,
                f"runner: {name} received: saving at the next step boundary, then exiting "
                "(Ctrl-C again aborts at once)\n".encode(),
            )

    def requested(self) -> int | None:
        """The signal to stop for, agreed by every process (checked at each step boundary)."""
        return any_process(self.signal_number or 0) or None

    def __enter__(self) -> "GracefulStop":
        for number in (signal.SIGTERM, signal.SIGINT):
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
