"""Whether a project's code may go on the import path here, checked before it does: whose its folders
are, and what its modules would hide.

Anyone who can write a folder above the one a user works in (a shared ``/tmp``, a download folder,
another user's home) could otherwise plant a ``pyproject.toml`` whose configs name code that runs: so,
like git's ``safe.directory``, a project found above is trusted only when its folder, its project file,
its config and code folders and what they hold belong to this user (or to root, who can change anything
anyway) and no other user may write them. The user trusts any other project by running from its folder
(or naming it to ``runner.train(project=...)``), or by listing it in ``RUNNER_TRUSTED_PROJECTS``.

Python imports a name from the first folder that holds it, so a ``yaml.py`` or a package ``torch/`` in
a code folder first on the import path would run in place of the library every command needs: runner
refuses such a folder in one line, and ``runner init`` a project named after such a library. Nothing is
imported to find out (``PathFinder.find_spec`` on a top-level name only looks at folders)."""

import importlib.machinery
import importlib.util
import itertools
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from runner.config.errors import ConfigError

# Entries of the config and code folders checked (a project's are a few hundred); a folder past this
# many is checked as far as this.
WALK_LIMIT = 10_000
TRUSTED_ENV = "RUNNER_TRUSTED_PROJECTS"  # folders, separated as PATH is, whose projects are trusted
# The project runner entered, handed to the processes it starts (joblib and submitit workers, a
# resume's command): its root folder, checked by the parent already.
PROJECT_ENV = "RUNNER_PROJECT"


def check_trusted(root: Path, start: Path, places: Iterable[Path]) -> None:
    """Refuse in one line the project at ``root``, found from ``start``, unless it is trusted;
    ``places`` are its project file and folders, each checked for its owner and who may write it."""
    root, start = root.resolve(), start.resolve()
    if root == start or root in named_trusted():
        return
    for place in places:
        problem = untrusted_because(place)
        if problem is not None:
            file, place, start, root = (shown(path) for path in (root / "pyproject.toml", place, start, root))
            raise ConfigError(
                f"{file}: not trusted as your project, found above {start}: {place} {problem}; if it is "
                f"yours, run runner from {root}, or trust it with export {TRUSTED_ENV}={root}"
            )


def shown(path: Path) -> str:
    """A path as one line can carry it (a folder's name may hold a newline): quoted where it must be."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def inside(folders: Iterable[Path], limit: int = WALK_LIMIT) -> Iterator[Path]:
    """The folders, then what they hold, at any depth (links are not followed into), the first
    ``limit`` entries: a config folder's group folders and files, a code folder's packages."""

    def walked() -> Iterator[Path]:
        for folder in folders:
            yield folder
            for parent, names, files in os.walk(folder):
                yield from (Path(parent, name) for name in [*names, *files])

    return itertools.islice(walked(), limit)


def named_trusted() -> set[Path]:
    """The folders ``RUNNER_TRUSTED_PROJECTS`` lists, and the project a parent runner entered."""
    named = [*os.environ.get(TRUSTED_ENV, "").split(os.pathsep), os.environ.get(PROJECT_ENV, "")]
    return {Path(folder).resolve() for folder in named if folder and os.path.isabs(folder)}


def owners() -> set[int]:
    """The users whose files are this user's: itself and root; under ``sudo``, the user who ran it (as
    git's ``safe.directory`` takes ``SUDO_UID``)."""
    found = {os.geteuid(), 0}
    sudo = os.environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and sudo.isdigit() and len(sudo) < 10:
        found.add(int(sudo))
    return found


def untrusted_because(place: Path) -> str | None:
    """Why ``place`` (a file or folder) is not safe to take code from; None where it is."""
    try:
        info = os.stat(place)
    except OSError as error:
        return f"cannot be checked ({error.strerror})"
    if info.st_uid not in owners():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & stat.S_IWOTH:
        return "is writable by every user"
    return None


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
