"""TrainState's old path, only for ``checkpoint/sharded_saves.py`` (being changed on another branch in
issue 25): delete this file when that import names ``runner.checkpoint.state``."""

from runner.checkpoint.state import TrainState

__all__ = ["TrainState"]
