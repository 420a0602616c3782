"""Whether a project found above the working folder may run its code here. Anyone who can write a
folder above the one a user works in (a shared ``/tmp``, a download folder, another user's home) could
otherwise plant a ``pyproject.toml`` whose configs name code that runs: so, like git's
``safe.directory``, a project found above is trusted only when its folder, its project file, its config
and code folders and what they hold belong to this user (or to root, who can change anything anyway)
and no other user may write them. The user trusts any other project by running from its folder (or
naming it to ``runner.train(project=...)``), or by listing it in ``RUNNER_TRUSTED_PROJECTS``."""

import itertools
import os
import stat
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
