"""The command line: the only layer that knows Hydra. Nothing else in runner imports it. The commands
are here at the top; the Hydra adapter is in ``hydra/``, the processes a command runs as in
``processes/``."""

from importlib import import_module
from types import ModuleType

# The Hydra callbacks a config names by string (``hydra.callbacks.*._target_``), by the paths they had
# before the adapter moved to hydra/: ``runner.cli.sweep_summary.SweepSummary`` still names the callback.
CALLBACKS_MOVED = ("hydra_start", "sweep_summary", "fresh_run_dir", "sweep_job_dirs")


def __getattr__(name: str) -> ModuleType:
    if name in CALLBACKS_MOVED:
        return import_module(f"runner.cli.hydra.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
