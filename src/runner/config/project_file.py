"""A ``pyproject.toml`` read as runner reads it while it looks for a project: in any folder from the
working one up, so possibly a stranger's. It is read only if it is a plain file (a FIFO would block the
read, ``/dev/zero`` never end it), at most ``SIZE_LIMIT`` bytes, nested at most as deep as Python's
recursion allows (``tomllib`` recurses per level), with no dotted key of more than ``KEY_PARTS_LIMIT``
parts (its work grows with their square), and once per process. One that cannot be read and is
not runner's (no ``tool.runner`` in it) is skipped with one warning naming it; runner's own is refused
in one line."""

import os
import re
import stat
import sys
from pathlib import Path

from runner.config.errors import ConfigError

SIZE_LIMIT = 256 << 10  # 256 KiB: a project file is a few KB (tomllib reads 1 MiB of tables in seconds)
# tomllib's time grows with the square of a dotted key's parts (a.a.a...: 4,000 parts take 2 s here, a
# 64 KiB line of them minutes); runner's own keys have 2 or 3 (tool.runner.defaults).
KEY_PARTS_LIMIT = 32
SEGMENT = r"(?:[A-Za-z0-9_-]+|\"[^\"\n]*\"|'[^'\n]*')"
# The patterns are compiled when a project file is first read (``re`` keeps them): most runs read none.
LONG_DOTTED_KEY = rf"(?<![A-Za-z0-9_-]){SEGMENT}(?:[ \t]*\.[ \t]*{SEGMENT}){{{KEY_PARTS_LIMIT},}}".encode()
# Where a file that does not parse still says it is runner's project file.
NAMES_RUNNER = rb"(?m)tool\s*\.\s*[\"']?runner\b|^\s*runner\s*="
# (path, device, inode, size, mtime) -> its [tool.runner] table (None: it has none, or was skipped).
read_before: dict[tuple, dict | None] = {}


def runner_table(path: Path) -> dict | None:
    """The ``[tool.runner]`` table of ``path``; None where there is no such file, it has no table, or
    it was skipped (with a warning). A broken file that names ``tool.runner`` raises ``ConfigError``."""
    if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10 has no tomllib, and reads no project file
        return None
    try:  # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        return skipped(path, f"it cannot be read ({error.strerror})")
    try:
        info = os.fstat(descriptor)
        key = (str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if key in read_before:
            return read_before[key]
        if not stat.S_ISREG(info.st_mode):
            table = skipped(path, "it is not a plain file")
        elif info.st_size > SIZE_LIMIT:
            table = skipped(path, f"it is {info.st_size:,} bytes; a project file is at most {SIZE_LIMIT:,}")
        else:
            table = parsed(path, read_all(descriptor, SIZE_LIMIT + 1))
    finally:
        os.close(descriptor)
    read_before[key] = table
    return table


def read_all(descriptor: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(descriptor, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def parsed(path: Path, data: bytes) -> dict | None:
    import tomllib  # here, not at the top: only a run that finds a pyproject.toml pays for its import

    if len(data) > SIZE_LIMIT:  # it grew since fstat
        return skipped(path, f"it is over {SIZE_LIMIT:,} bytes; a project file is at most {SIZE_LIMIT:,}")
    try:
        if re.search(LONG_DOTTED_KEY, data):
            raise OverflowError
        content = tomllib.loads(data.decode("utf-8"))
    except OverflowError:
        problem = f"it holds a dotted key of more than {KEY_PARTS_LIMIT} parts"
    except UnicodeDecodeError:
        problem = "it is not UTF-8 text"
    except tomllib.TOMLDecodeError as error:
        problem = f"it is not valid TOML ({error})"
    except RecursionError:
        problem = "it is nested too deeply"
    else:
        tool = content.get("tool")
        table = tool.get("runner") if isinstance(tool, dict) else None
        if table is not None and not isinstance(table, dict):
            raise ConfigError(f"{path}: tool.runner must be a table ([tool.runner])")
        return table
    if re.search(NAMES_RUNNER, data):
        raise ConfigError(f"{path}: {problem}; runner reads its [tool.runner] table: fix the file")
    return skipped(path, problem)


def skipped(path: Path, why: str) -> None:
    print(f"runner: warning: skipping {path}: {why}; it is not read as a runner project", file=sys.stderr)
    return None
