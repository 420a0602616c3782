"""The folder ``python -m runner`` is started in is not searched for modules unless it is the user's
project. Python puts the current folder first on ``sys.path`` for ``-m``, so a ``matplotlib.py`` planted
in a downloaded sweep would run as soon as ``report`` imports matplotlib there.

This runs before anything else is imported, and imports only what the interpreter has loaded before it
searches any folder (``os``, ``sys``) until the start folder is off the path: a planted ``tomllib.py``
is not read either."""

import os
import sys


def is_project(folder: str) -> bool:
    """A folder whose ``pyproject.toml`` has a ``[tool.runner]`` table: the user's own project."""
    import tomllib

    try:
        with open(os.path.join(folder, "pyproject.toml"), "rb") as file:
            project = tomllib.load(file)
    except (OSError, ValueError, RecursionError):  # no file, not TOML (TOMLDecodeError is a ValueError)
        return False
    tool = project.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("runner"), dict)


def same_folder(entry: str, folder: str) -> bool:
    return os.path.realpath(entry or os.curdir) == folder


def named_on_pythonpath(folder: str, pythonpath: str) -> bool:
    return any(same_folder(entry, folder) for entry in pythonpath.split(os.pathsep) if entry)


def protect_sys_path(path: list[str] | None = None, environ: dict[str, str] | None = None) -> None:
    """Remove the start folder from the front of ``path`` (``sys.path``), unless it is a project or
    ``PYTHONPATH`` names it. Nothing changes where it is not there (``python -P``, a console script)."""
    path = sys.path if path is None else path
    environ = dict(os.environ) if environ is None else environ
    try:
        folder = os.path.realpath(os.getcwd())
    except OSError:  # the start folder was removed: nothing there to import
        return
    if not path or not same_folder(path[0], folder):
        return
    first = path.pop(0)
    if named_on_pythonpath(folder, environ.get("PYTHONPATH", "")) or is_project(folder):
        path.insert(0, first)
