"""runner's phases by name in a profiler's trace (data, forward, backward, optimizer, logging,
checkpoint, validation): ``torch.profiler.record_function`` ranges while a profiler records
(``profile.steps``), and nothing at all otherwise: a shared no-op context, no call into torch."""

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from torch.profiler import record_function

NOTHING = nullcontext()
_recording = [False]  # one flag for the process: the profiler records one run's steps at a time


def recording(on: bool) -> None:
    """Called by the profiler when it starts (``True``) and stops (``False``) recording."""
    _recording[0] = on


def is_recording() -> bool:
    return _recording[0]


def phase(name: str) -> AbstractContextManager:
    """A named range around a block (forward, backward, optimizer) while the profiler records."""
    return record_function(name) if _recording[0] else NOTHING


@dataclass
class Ranges:
    """One open range at a time, ended when the next begins: the loop's phases follow each other
    (``StepTimes.now_in``), and the step's own ranges nest inside ``compute``."""

    current: Any = None

    def enter(self, name: str) -> None:
        if self.current is not None:
            self.close()
        if _recording[0]:
            self.current = record_function(name)
            self.current.__enter__()

    def close(self) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            current.__exit__(None, None, None)
