"""Test plug-in: a worker that dies, as one does when its machine fails. At step ``at`` it SIGKILLs its
own process on rank ``rank``, at torchrun's first start of the group only (a restarted group goes on)."""

import os
import signal


class KillsRankAtStep:
    def __init__(self, at: int = 5, rank: int = 1) -> None:
        self.at, self.rank = at, rank

    def on_step_end(self, context) -> None:
        first_start = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if context.step == self.at and os.environ.get("RANK") == str(self.rank) and first_start:
            os.kill(os.getpid(), signal.SIGKILL)
