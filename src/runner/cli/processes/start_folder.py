"""The folder ``python -m runner`` is started in is not searched for modules unless ``PYTHONPATH``
names it. Python puts the current folder first on ``sys.path`` for ``-m``, so a ``matplotlib.py`` planted
in a downloaded sweep would run as soon as ``report`` imports matplotlib there. A project's code folder
(which may be that folder) goes on the path later, checked, and only for the commands that build the
user's model or data (``runner.cli.project``).

This runs before anything else is imported, and imports only what the interpreter has loaded before it
searches any folder (``os``, ``sys``): it reads no file either (a ``pyproject.toml`` there may be a FIFO
or a link to ``/dev/zero``)."""

import os
import sys


def same_folder(entry: str, folder: str) -> bool:
    return os.path.realpath(entry or os.curdir) == folder


def named_on_pythonpath(folder: str, pythonpath: str) -> bool:
    return any(same_folder(entry, folder) for entry in pythonpath.split(os.pathsep) if entry)


def protect_sys_path(path: list[str] | None = None, environ: dict[str, str] | None = None) -> None:
    """Remove the start folder from the front of ``path`` (``sys.path``), unless ``PYTHONPATH`` names
    it. Nothing changes where it is not there (``python -P``, a console script)."""
    path = sys.path if path is None else path
    environ = dict(os.environ) if environ is None else environ
    try:
        folder = os.path.realpath(os.getcwd())
    except OSError:  # the start folder was removed: nothing there to import
        return
    if not path or not same_folder(path[0], folder):
        return
    first = path.pop(0)
    if named_on_pythonpath(folder, environ.get("PYTHONPATH", "")):
        path.insert(0, first)
