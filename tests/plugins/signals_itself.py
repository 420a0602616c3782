"""Test plug-in: a stop signal at step ``at``, sent by the run to itself, as a scheduler sends one."""

import os
import signal


class SignalsAtStep:
    def __init__(self, at: int = 2, name: str = "SIGTERM") -> None:
        self.at, self.signal_number = at, signal.Signals[name]

    def on_step_end(self, context) -> None:
        if context.step == self.at:
            os.kill(os.getpid(), self.signal_number)
