"""Writing a run's files so that a crash or a full disk never leaves half of one, and so that a write
the machine refuses (a full disk, a quota, a read-only or unwritable place) is one line naming the file.

A file is written to ``.<name>.<pid>.tmp`` beside it, fsynced and renamed over it: at any instant the
folder holds the old file or the new one. A process killed mid-write leaves the temporary file; a run
removes those of its checkpoint folder when it starts writing there.
"""

import errno
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from runner.config.errors import UserError

log = logging.getLogger("runner")
TEMPORARY = re.compile(r"\..+\.\d+\.tmp")
# Errors that mean "this place takes no more writes" rather than a bug: the user frees space or fixes
# permissions. EFBIG is a file size limit (``ulimit -f``), which is a full disk of one file.
REFUSED_WRITES = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class WriteError(UserError):
    """The run cannot write one of its files; ``advice`` says what is safe and how to go on."""

    def __init__(self, path: Path, code: int, advice: str = "") -> None:
        self.path, self.code, self.advice = path, code, advice
        message = f"cannot write {path}: {os.strerror(code)}"
        super().__init__(f"{message}; {advice}" if advice else message)

    @property
    def no_space(self) -> bool:
        return self.code in NO_SPACE

    def with_advice(self, advice: str) -> "WriteError":
        return WriteError(self.path, self.code, advice)


def refused_write(error: BaseException) -> OSError | None:
    """The OSError of a refused write behind ``error``, if there is one. torch's writer reports a
    failed write as a RuntimeError raised while handling the OSError, so the chain is searched."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno in REFUSED_WRITES:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """A refused write inside becomes a :class:`WriteError` naming ``path``; other errors pass as they are."""
    try:
        yield
    except WriteError:
        raise
    except Exception as error:
        refused = refused_write(error)
        if refused is None:
            raise
        raise WriteError(path, refused.errno) from error


def temporary_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def fsync_folder(folder: Path) -> None:
    """Makes a rename in ``folder`` durable."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write`` fills a temporary file in the same folder; it is fsynced and renamed over ``path``, and
    the folder fsynced. A crash or a full disk at any instant leaves either the old file or the new one."""
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def write_text(path: Path, text: str) -> None:
    """A small text file, atomically; a refused write is a :class:`WriteError`."""
    with writing(path):
        atomic_write(path, lambda handle: handle.write(text.encode()))


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """The temporary files an interrupted write left in ``folder`` (``.<name>.<pid>.tmp``). Only the run
    that holds the run directory's lock calls this, so no other write is in progress there."""
    stale = [path for path in folder.iterdir() if TEMPORARY.fullmatch(path.name) and path.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        log.info(
            "removed %d temporary file(s) an interrupted save left in %s: %s",
            len(stale), folder, ", ".join(path.name for path in stale),
        )  # fmt: skip
    return stale
