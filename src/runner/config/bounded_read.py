"""A small file from a run's folder, read only if it is a plain file and at most a given size: a FIFO
put in its place would block a plain ``open`` forever, a device never end the read, and a file of
gigabytes (copied, damaged, or made to) fill memory. Everything runner keeps of a run and reads back
(``trackers.json``, ``result.json``, a sweep's ``mlflow_sweep.json``) is a few KB."""

import os
import stat
from pathlib import Path

RECORD_LIMIT = 1 << 20  # 1 MiB: a record runner writes is a few KB


class UnreadableFile(ValueError):
    """A file that is not a plain one, or is larger than the bound; the message says which, in words a
    one-line error can carry."""


def open_plain(path: Path, flags: int = os.O_RDONLY) -> int:
    """A descriptor of ``path`` opened with ``flags``, without following a link and without waiting (a
    FIFO opens at once), once it is known to be a plain file (one ``O_CREAT`` makes gets 0o666 less the
    umask, as ``open`` gives). ``FileNotFoundError`` where there is
    none; ``UnreadableFile`` for a link, a FIFO, a folder or a device."""
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except FileNotFoundError:
        raise
    except OSError as error:
        if os.path.islink(path):
            raise UnreadableFile("it is a link, not a plain file") from None
        if os.path.isdir(path):
            raise UnreadableFile("it is a folder, not a plain file") from None
        raise UnreadableFile(f"it cannot be opened ({error.strerror})") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UnreadableFile("it is not a plain file (a FIFO, a folder or a device)")
    return descriptor


def read_bounded(path: Path, limit: int = RECORD_LIMIT) -> bytes:
    """The bytes of the plain file ``path``; ``UnreadableFile`` where it is not one or holds more than
    ``limit`` bytes, ``FileNotFoundError`` where there is none."""
    descriptor = open_plain(path)
    try:
        size = os.fstat(descriptor).st_size
        if size > limit:
            raise UnreadableFile(f"it is {size:,} bytes, more than the {limit:,} runner reads of it")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(descriptor, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(descriptor)
    if total > limit:  # it grew since fstat
        raise UnreadableFile(f"it is over {limit:,} bytes, more than runner reads of it")
    return b"".join(chunks)
