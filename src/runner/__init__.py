"""runner: a config-driven PyTorch experiment runner. From Python: ``runner.train([...])``,
``runner.load_model(path)``; a mistake the user can fix is a ``runner.UserError``."""

from typing import Any

from runner.config.errors import UserError

__version__ = "0.1.0"
__all__ = ["TrainResult", "UserError", "load_model", "train"]


def __getattr__(name: str) -> Any:
    """The Python API (``runner.api``), imported when first used: ``import runner`` stays light."""
    if name in ("train", "load_model", "TrainResult"):
        from runner import api

        return getattr(api, name)
    raise AttributeError(f"module 'runner' has no attribute {name!r}")
