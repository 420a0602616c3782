"""A small file from a run's or a sweep's folder, read as data with work bounded by its size. It is read
only if it is a plain file and at most a given size: a FIFO put in its place would block a plain ``open``
forever, a device never end the read, and a file of gigabytes (copied, damaged, or made to) fill memory.
Everything runner keeps of a run and reads back (``trackers.json``, ``result.json``, a sweep's
``mlflow_sweep.json``, ``run.yaml``, ``.hydra/*.yaml``) is a few KB.

YAML records are read as plain data: an alias repeats a whole subtree for a few bytes (nine levels of ten
make a 1 KB file of 10**9 values to whoever walks it), so a record that holds one is refused: neither
runner nor Hydra writes aliases. Nesting deeper than any record holds is refused too, each in words a
one-line error can carry."""

import os
import stat
from pathlib import Path
from typing import Any

import yaml

# 1 MiB: a record runner writes is a few KB (libyaml read 120 KB of YAML a second on a busy 2-core machine)
RECORD_LIMIT = 1 << 20
MAX_DEPTH = 100  # runner's configs nest about six levels
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it
OPENS, CLOSES = (
    (yaml.SequenceStartEvent, yaml.MappingStartEvent),
    (yaml.SequenceEndEvent, yaml.MappingEndEvent),
)


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


class UnreadableRecord(ValueError):
    """A record that is not plain YAML data of a readable size; the message says why, in a few words."""


def load_plain(text: str) -> Any:
    """``text`` as plain YAML data; ``UnreadableRecord`` where it holds an alias, nests too deeply or is
    not YAML. Its parser's events are checked first (a flat stream, however deep the text nests), so
    nothing is composed, repeated or recursed into before the text is known to be plain."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise UnreadableRecord(
                    f"it holds a YAML alias (*{event.anchor}), which no record runner or Hydra writes"
                )
            depth += isinstance(event, OPENS) - isinstance(event, CLOSES)
            if depth > MAX_DEPTH:
                raise UnreadableRecord(f"it is nested too deeply, more than {MAX_DEPTH} levels")
        return yaml.load(text, Loader=LOADER)
    except yaml.YAMLError as error:
        if "increasing flow level" in str(error) or "nesting" in str(error):  # libyaml's own limit
            raise UnreadableRecord(f"it is nested too deeply, more than {MAX_DEPTH} levels") from None
        raise UnreadableRecord(f"it is not YAML ({str(error).splitlines()[0]})") from None


def read_plain(path: Path) -> Any:
    """A record file's YAML data. ``UnreadableRecord`` for a file that is not a plain one (a FIFO would
    block the read, a device never end it), larger than ``RECORD_LIMIT``, not UTF-8, or not plain YAML;
    ``OSError`` as reading raises it."""
    if not path.is_file():
        raise UnreadableRecord("it is not a plain file")
    with open(path, "rb") as handle:
        data = handle.read(RECORD_LIMIT + 1)
    if len(data) > RECORD_LIMIT:
        raise UnreadableRecord(
            f"it is larger than {RECORD_LIMIT >> 20} MiB, more than any record runner writes"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableRecord("it is not UTF-8 text") from None
    return load_plain(text)
