"""What a project's code folder would hide once it is first on the import path. Python imports a name
from the first folder that holds it, so a ``yaml.py`` or a package ``torch/`` there would run in place
of the library every command needs: runner refuses such a folder in one line, and ``runner init`` a
project named after such a library. Nothing is imported to find out (``PathFinder.find_spec`` on a
top-level name only looks at folders)."""

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

SUFFIXES = tuple(importlib.machinery.all_suffixes())  # .py, .pyc, extension modules


def top_level_modules(folder: Path) -> dict[str, Path]:
    """The modules and regular packages directly in ``folder``, by the name they are imported as.
    Folders without ``__init__`` are namespace portions, which hide nothing."""
    found: dict[str, Path] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return found
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir() and any((path / f"__init__{suffix}").is_file() for suffix in SUFFIXES):
            name = entry.name
        else:
            name = next((entry.name[: -len(s)] for s in SUFFIXES if entry.name.endswith(s)), "")
        if name.isidentifier() and name not in found:
            found[name] = path
    return found


def is_inside(location: str | None, folder: Path) -> bool:
    if not location:
        return False
    try:
        return Path(location).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def importable_elsewhere(name: str, folder: Path) -> str | None:
    """Where ``name`` is imported from when ``folder`` is not on the path: the standard library, an
    installed package's folder, or the module this process already imported; None where nothing else
    has that name."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "Python's standard library"
    loaded = sys.modules.get(name)
    if loaded is not None:
        places = [getattr(loaded, "__file__", None), *list(getattr(loaded, "__path__", []) or [])]
        places = [place for place in places if place]
        if not any(is_inside(place, folder) for place in places):
            return f"{places[0] if places else 'a module'}, imported already"
        return None
    others = [entry for entry in sys.path if not is_inside(entry or os.curdir, folder)]
    spec = importlib.machinery.PathFinder.find_spec(name, others)
    if spec is None:
        return None
    places = (
        [spec.origin] if spec.origin and spec.has_location else list(spec.submodule_search_locations or [])
    )
    return places[0] if places else name


def hidden_modules(folder: Path) -> list[tuple[str, Path, str]]:
    """``(name, its file in folder, what it would hide)`` for each module of ``folder`` that would hide
    another."""
    folder = folder.resolve()
    hidden = []
    for name, path in top_level_modules(folder).items():
        elsewhere = importable_elsewhere(name, folder)
        if elsewhere is not None:
            hidden.append((name, path, elsewhere))
    return hidden


STARTUP_MODULES = ("sitecustomize", "usercustomize")  # what Python's site imports in every process


def startup_files(folder: Path) -> list[Path]:
    """The files of ``folder`` that Python's ``site`` would run at the start of every process with the
    folder on its ``PYTHONPATH`` (``sitecustomize``, ``usercustomize``), or with it as a site folder
    (``.pth`` files, whose ``import`` lines run)."""
    modules = top_level_modules(folder)
    found = [modules[name] for name in STARTUP_MODULES if name in modules]
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    return found + [folder / name for name in names if name.endswith(".pth")]


def package_taken(package: str) -> str | None:
    """Where a new project's package ``package`` would clash with what is importable now."""
    if package in sys.stdlib_module_names or package in sys.builtin_module_names:
        return "Python's standard library"
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin if spec.origin and spec.has_location else "an installed package"
