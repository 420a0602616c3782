"""Where ``runner export`` writes: its folders made, the place locked against a second export, the files
written into a staging folder of export's own making (``tempfile.mkdtemp`` beside the output: a name
no user holds) and renamed into place. A failure at any step (a full disk, a read-only place, ``/proc``)
is one line, and leaves nothing: no staging folder, no lock, no folder export made on its way."""

import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from runner.checkpoint.durable import NO_SPACE, WriteError
from runner.config.errors import ConfigError

ADVICE = "nothing was exported; give --output a folder in a writable place"
NO_SPACE_ADVICE = "nothing was exported; free space and export again"


def check_output(output: Path) -> None:
    """Before any work: an output that exists is kept, and one that is a link (a dangling one too) is
    not followed."""
    if output.name in ("", ".", ".."):
        raise ConfigError(f"export: --output {output} names no folder of its own; give the new folder's path")
    if output.is_symlink():
        raise ConfigError(
            f"export: {output} is a link (to {os.readlink(output)}); export writes a new folder and follows "
            "no link there: give --output a path that does not exist"
        )
    if output.exists():
        raise ConfigError(
            f"export: {output} exists and is kept as it is; give another --output, or remove it"
        )


def write_staged(output: Path, write: Callable[[Path], None]) -> None:
    """``write(folder)`` into a staging folder, renamed to ``output`` once whole; the folders made for it
    are removed again if it fails."""
    made = made_folders(output.parent)
    try:
        with locked(output), refused_writes(output):
            check_output(output)  # again: another export may have finished while this one loaded
            staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".export", dir=output.parent))
            try:
                written = staging / output.name  # mkdtemp's folder is private; this one has the umask's mode
                written.mkdir()
                write(written)
                written.rename(output)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        for folder in made:
            with_folder_removed(folder)
        raise


def made_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and the folders above it that are missing; those made, innermost first."""
    missing = []
    while not (folder.exists() or folder.is_symlink()):
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            made.mkdir()
        except OSError as error:
            for earlier in missing[missing.index(made) + 1 :]:
                with_folder_removed(earlier)
            raise write_error(made, error) from None
    return missing


def with_folder_removed(folder: Path) -> None:
    with suppress(OSError):
        folder.rmdir()  # only if empty: never what someone else put there meanwhile


@contextmanager
def locked(output: Path) -> Iterator[None]:
    """``.<name>.export-lock`` beside ``output``, locked (``flock``) while the export writes: a second
    export to the same place is refused in one line. An empty lock file a killed export left is taken
    over; any other file under that name is the user's, and is left as it is."""
    lock = output.with_name(f".{output.name}.export-lock")
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(lock, flags, 0o644)
    except OSError as error:
        raise write_error(output, error) from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode) or found.st_size:
            raise ConfigError(
                f"export: {lock} is in the way (export locks {output} with an empty file of that name); move "
                "it away, or give another --output"
            )
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy(output, lock) from None
        if os.stat(lock, follow_symlinks=False).st_ino != found.st_ino:  # released and removed meanwhile
            raise busy(output, lock)
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
    finally:
        os.close(descriptor)


def busy(output: Path, lock: Path) -> ConfigError:
    return ConfigError(
        f"export: another export is writing {output} now (it holds {lock}); wait for it to end, or give "
        "another --output"
    )


@contextmanager
def refused_writes(output: Path) -> Iterator[None]:
    """An error of the disk or the place (``OSError``, or safetensors' own error around one) as one line
    naming the output."""
    try:
        yield
    except OSError as error:
        raise write_error(Path(error.filename) if error.filename else output, error) from None
    except Exception as error:
        found = re.search(r"os error (\d+)", str(error))
        if type(error).__name__ != "SafetensorError" or found is None:
            raise
        raise write_error(output, OSError(int(found.group(1)), "")) from None


def write_error(path: Path, error: OSError) -> WriteError:
    code = error.errno or errno.EIO
    return WriteError(path, code, NO_SPACE_ADVICE if code in NO_SPACE else ADVICE)
