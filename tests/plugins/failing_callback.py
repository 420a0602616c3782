"""Test plug-in: a callback with a bug that raises mid-run, as a user's code may."""


class FailsAtStep:
    def __init__(self, at: int = 2) -> None:
        self.at = at

    def on_step_end(self, context) -> None:
        if context.step == self.at:
            raise RuntimeError(f"a bug in the user's callback at step {context.step}")
