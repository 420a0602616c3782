"""runner from Python, for notebooks and scripts: ``runner.train([...])`` trains as
``python -m runner train ...`` does, in this process; ``runner.load_model(path)`` returns a run's
trained model. A mistake the user can fix is raised as ``runner.UserError`` (one line, as the command
line prints it), never as a Hydra traceback; an error in the user's own code keeps its traceback."""

import json
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.config.errors import ConfigError, UserError


@dataclass(frozen=True)
class TrainResult:
    """How a training ended, as its ``result.json`` records it."""

    run_dir: Path
    status: str  # ok; failed, or incomplete (stopped by a signal)
    monitor: str  # the metric best is of (checkpoint.monitor)
    best: float | None
    best_step: int | None
    final: dict[str, float] = field(default_factory=dict)  # the last validation's metrics


# One call at a time in a process: each enters a project and sets the working folder, sys.path and
# os.environ for its length, and Hydra's state is the process's. A call from another thread waits; a
# call inside a call (a model that loads another run's) goes on.
ONE_CALL = threading.RLock()
PathGiven = str | bytes | os.PathLike


def train(overrides: Iterable[str] = (), project: PathGiven | None = None) -> TrainResult:
    """Train once in this process with the command line's config, checks and run directory:
    ``runner.train(["optimizer.lr=0.01", "trainer.max_epochs=3"])`` is ``python -m runner train
    optimizer.lr=0.01 trainer.max_epochs=3``. ``project``: the folder of a project (default: the
    working folder, or any folder above it with a ``pyproject.toml`` holding ``[tool.runner]``).
    ``sys.path``, ``os.environ``, the working folder and ``sys.argv`` are left as they were found.
    From several threads, calls run one at a time; a run in a thread other than the main one takes no
    signals (Ctrl-C goes to the program)."""
    arguments = checked_overrides(overrides)
    project = path_of(project, "train", "project") if project is not None else None
    from runner.cli.hydra.hydra_start import planned_run_dir
    from runner.cli.train import main_train

    with ONE_CALL, process_kept(), entered(project):
        planned_run_dir.clear()
        main_train(arguments)
    if not planned_run_dir:
        raise ConfigError("runner.train: the run made no run directory")
    return result_of(planned_run_dir[-1])


def load_model(
    path: PathGiven,
    device: str = "cpu",
    allow_targets: str | Iterable[str] = (),
    project: PathGiven | None = None,
) -> Any:
    """The trained model of a run directory (its ``best.pt``; without one, its newest checkpoint) or of
    a checkpoint: built from the config stored with it, its weights loaded, in ``eval()`` mode. As
    with ``runner eval``, the stored config builds only runner's ``_target_``s, those the project's
    config folder names (``project``, as for ``train``), and ``allow_targets``: a list of targets, or
    one string as the command line takes them (``"mylab.Net"``, ``"mylab.Net,mylab.Head"``)."""
    from runner.cli.hydra.hydra_app import config_folders
    from runner.cli.hydra.job import build
    from runner.config.checks import check_value
    from runner.config.trust import folder_targets
    from runner.tools.trained_model import load_trained_model

    run, allowed = path_of(path, "load_model", "path"), targets_of(allow_targets)
    project = path_of(project, "load_model", "project") if project is not None else None
    if not isinstance(device, str):
        raise ConfigError(
            f"runner.load_model(device={shown(device)}): device must be a string, such as 'cpu' or 'cuda:0'; "
            f"got {type(device).__name__}"
        )
    with ONE_CALL, process_kept(), entered(project):
        check_value("device", device)
        trusted = set().union(*(folder_targets(folder) for folder in config_folders(None)))
        return load_trained_model(run, build, trusted | allowed, device)


def path_of(value: Any, function: str, name: str) -> Path:
    """A path as Python's own file functions take one (``str``, ``bytes``, ``os.PathLike``); anything
    else, or an empty one, is refused by name rather than met as a TypeError inside."""
    text = None
    if isinstance(value, PathGiven):
        with suppress(TypeError):  # an os.PathLike whose __fspath__ gives neither str nor bytes
            text = os.fsdecode(value)
    if not text or "\0" in text:
        raise ConfigError(
            f"runner.{function}({name}={shown(value)}): {name} must be a path (a str, bytes or pathlib.Path; "
            f"not empty, no NUL character); got {type(value).__name__}"
        )
    return Path(text)


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def targets_of(given: Any) -> set[str]:
    """``allow_targets``: one string as the command line takes it (comma-separated), or strings."""
    if isinstance(given, str):
        return {target for target in given.split(",") if target}
    items = list(given) if isinstance(given, Iterable) and not isinstance(given, bytes | Mapping) else None
    if items is None or not all(isinstance(item, str) for item in items):
        raise ConfigError(
            f"runner.load_model(allow_targets={shown(given)}): allow_targets takes _target_ names, as a list "
            "of strings (['mylab.Net']) or one string ('mylab.Net,mylab.Head')"
        )
    return set(items)


def checked_overrides(overrides: Iterable[str]) -> list[str]:
    """Any iterable of strings (a list, a tuple, a generator: read once, here); a string, a mapping or
    anything else is refused rather than read as something it is not."""
    given = (
        list(overrides)
        if isinstance(overrides, Iterable) and not isinstance(overrides, str | bytes | Mapping)
        else None
    )
    if given is None or not all(isinstance(item, str) for item in given):
        raise ConfigError(
            "runner.train takes the overrides as strings (a list, a tuple or any iterable of them), e.g. "
            f"['optimizer.lr=0.01']; got {overrides if given is None else given!r}"
        )
    sweep = [item for item in given if item in ("-m", "--multirun")]
    if sweep:
        raise ConfigError(f"{sweep[0]}: runner.train runs one training; sweep with python -m runner train -m")
    return given


@contextmanager
def entered(project: str | os.PathLike | None) -> Iterator[None]:
    """In the project (its code importable, its configs on Hydra's search path), with its mistakes
    raised as ``UserError``."""
    from runner.cli.processes.environment import check_process_environment
    from runner.cli.project import enter

    with raise_errors():
        check_process_environment()
        if project is not None and not Path(project).is_dir():
            raise ConfigError(f"project={project}: no such folder")
        enter(Path(project) if project is not None else None)
        yield


@contextmanager
def raise_errors() -> Iterator[None]:
    from runner.cli.exits import raise_user_errors

    with raise_user_errors():
        yield


@contextmanager
def process_kept() -> Iterator[None]:
    """Each call as it found the process: ``sys.path`` and ``os.environ`` (a project's code folder,
    ``PYTHONPATH``, ``RUNNER_PROJECT``: a later call elsewhere must not find this project), the working
    folder and ``sys.argv`` (Hydra reads it). Within it ``HYDRA_FULL_ERROR`` is set: Hydra would print a
    trimmed traceback, and an error in the user's code is raised with its own."""
    path, environment, argv, folder = list(sys.path), dict(os.environ), list(sys.argv), os.getcwd()
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        sys.path[:] = path
        sys.argv[:] = argv
        for name in [name for name in os.environ if name not in environment]:
            del os.environ[name]
        for name, value in environment.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        if os.getcwd() != folder:
            os.chdir(folder)


def result_of(run_dir: Path) -> TrainResult:
    from runner.config.bounded_read import read_bounded
    from runner.observe.records import RESULT_FILE

    path = run_dir / RESULT_FILE
    try:
        result = json.loads(read_bounded(path))
    except (OSError, ValueError, RecursionError):
        result = {}
    return TrainResult(
        run_dir=run_dir,
        status=str(result.get("status", "incomplete")),
        monitor=str(result.get("monitor", "")),
        best=result.get("best"),
        best_step=result.get("best_step"),
        final=dict(result.get("final", {})),
    )


__all__ = ["TrainResult", "UserError", "load_model", "train"]
