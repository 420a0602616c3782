"""Out of memory with several processes: every process learns that one ran out, at the same point.

A process that runs out cannot leave a step alone: the others would wait for it in the step's next
collective. So before each collective of a step every process says whether it ran out (one small
collective on the CPU): once per window, after its backward, before the gradients are averaged (and
after the first forward where the model says its item count, which is summed over the processes):
``agreeing_step.py``, the step and validation chosen for it.
A process that runs out says so at once; the others learn it where they next ask (after running the
window's other micro-batches: they hold no collective), and all raise :class:`OutOfMemoryOnRank`
together: ``oom.py`` then splits the micro-batch on every process alike. For that, no collective may
run inside a forward or backward: the gradients are averaged by runner after the window, not by DDP
during its last backward, whose bookkeeping a forward left unfinished on some processes would put out
of step.
"""

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from runner.training.distributed import any_process


class OutOfMemoryOnRank(Exception):
    """A process ran out of memory (this one or another): every process raises it at the same point."""

    def __init__(self, rank: int):
        super().__init__(f"out of memory on rank {rank}")
        self.rank = rank


@dataclasses.dataclass
class Agreement:
    """Whether any process ran out of memory, agreed at points every process reaches in the same order.
    Off (one process, ``on_oom=raise``, FSDP) it agrees on nothing: an error goes up as it came."""

    rank: int = 0
    enabled: bool = False

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Around a window's forwards and backwards: where this process runs out it tells the others at
        once, who learn it at their next :meth:`agree`."""
        try:
            yield
        except torch.OutOfMemoryError:
            if not self.enabled:
                raise
            self._tell(ran_out=True)

    def agree(self) -> None:
        """Before a collective of the step: raise if any process ran out."""
        if self.enabled:
            self._tell(ran_out=False)

    @contextmanager
    def evaluation(self) -> Iterator[None]:
        """Around a validation's forwards: a process that runs out leaves its loop, the others finish
        theirs (their counts may differ), and all learn it before the validation's sums."""
        ran_out = False
        try:
            yield
        except torch.OutOfMemoryError:
            if not self.enabled:
                raise
            ran_out = True
        if self.enabled:
            self._tell(ran_out)

    def _tell(self, ran_out: bool) -> None:
        if ranked := any_process(self.rank + 1 if ran_out else 0):  # the highest rank that ran out
            raise OutOfMemoryOnRank(ranked - 1) from None
