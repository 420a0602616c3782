"""One writer per run directory. While a run writes its directory, ``<run dir>/.lock`` names it (pid,
host, start time, scheduler job); a second run there (two ``resume=auto`` processes, a ``resume=`` of
a run still training) is refused with one line naming the holder, before it writes anything.

A killed process (SIGKILL) leaves its lock behind. A lock whose process is gone from this host, or
that a requeued scheduler job left on another node, is taken over with a warning.
"""

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.checkpoint.durable import writing
from runner.config.errors import UserError

log = logging.getLogger("runner")
LOCK_FILE = ".lock"


class RunDirBusy(UserError):
    """Another run is writing this run directory."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    since: float  # seconds since the epoch
    job: str | None = None  # the scheduler's job id: a requeued job keeps it

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on host {self.host} (since {when})"


UNREADABLE = Holder(pid=-1, host="?", since=0.0)


def scheduler_job() -> str | None:
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")


def this_process() -> Holder:
    return Holder(os.getpid(), socket.gethostname(), time.time(), scheduler_job())


def read_holder(path: Path, patience: float = 1.0) -> Holder | None:
    """The lock's holder; None when there is no lock. A lock is written right after it is created:
    an empty one is read again for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        if path.exists() and not path.is_file():  # a FIFO would block the read: no lock runner wrote
            return UNREADABLE
        try:
            holder = Holder(**json.loads(path.read_text()))
            if not well_formed(holder):
                return UNREADABLE
            return holder
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, RecursionError):  # RecursionError: JSON nested deep
            if time.monotonic() > deadline:
                return UNREADABLE
            time.sleep(0.05)


def well_formed(holder: Holder) -> bool:
    def number(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    return (
        isinstance(holder.pid, int) and 0 < holder.pid < 2**31 and isinstance(holder.host, str)
        and number(holder.since) and 0 <= holder.since < 2**40
        and (holder.job is None or isinstance(holder.job, str))
    )  # fmt: skip


def started_at(pid: int) -> float | None:
    """When a process of this host started (Linux's /proc); None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time in ticks
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def is_stale(holder: Holder) -> bool:
    """Its process is gone: dead on this host, or this very pid in an earlier life (a restarted
    container), or a pid reused since; on another host, only a requeued job of ours can tell."""
    if holder == UNREADABLE:  # nothing says whose it is
        return False
    if holder.host != socket.gethostname():
        return holder.job is not None and holder.job == scheduler_job()
    if holder.pid == os.getpid():
        return True
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    started = started_at(holder.pid)
    return started is not None and started > holder.since + 2  # 2 s: the clocks' resolution


def busy(run_dir: Path, holder: Holder) -> RunDirBusy:
    path = run_dir / LOCK_FILE
    if holder == UNREADABLE:
        return RunDirBusy(
            f"{run_dir} is locked by {path}, which cannot be read; if no run is writing there, remove it"
        )
    elsewhere = (
        f"; if that run is gone (its machine stopped), remove {path}"
        if holder.host != socket.gethostname()
        else ""
    )
    return RunDirBusy(
        f"{run_dir} is being written by {holder}; wait for that run to end or stop it first (two runs "
        f"in one directory would mix their checkpoints and events){elsewhere}"
    )


def refuse_if_held(run_dir: Path) -> None:
    """Before anything is built: a run still writing here is named now, not after the set-up."""
    holder = read_holder(run_dir / LOCK_FILE)
    if holder is not None and not is_stale(holder):
        raise busy(run_dir, holder)


def acquire(run_dir: Path) -> Path:
    """Create the lock (``O_CREAT | O_EXCL``: of two runs, one wins); a stale one is taken over."""
    path = run_dir / LOCK_FILE
    me = this_process()
    for _ in range(3):
        try:
            with writing(path):
                handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = read_holder(path)
            if holder is not None and not is_stale(holder):
                raise busy(run_dir, holder) from None
            if holder is not None and not take_over(path, holder):
                raise busy(run_dir, read_holder(path) or holder) from None
            if holder is not None:
                log.warning("%s was left by %s, which is no longer running; taking it over", path, holder)
            continue
        try:
            with writing(path):
                os.write(handle, json.dumps(asdict(me)).encode())
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(handle)
        return path
    raise busy(run_dir, read_holder(path) or me)


def take_over(path: Path, stale: Holder) -> bool:
    """Remove the stale lock ``stale``, and only it: two runs that both found it stale would otherwise
    both take over (the second removing the first one's new lock). The lock is moved aside first (a
    rename: one run gets each file) and read again; a live run's new lock is put back."""
    aside = path.with_name(f"{path.name}.{os.getpid()}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # another run removed it: try to create ours
    if read_holder(aside, patience=0.0) == stale:
        aside.unlink(missing_ok=True)
        return True
    with suppress(FileExistsError):
        os.link(aside, path)  # back, unless a third run has made one meanwhile
    aside.unlink(missing_ok=True)
    return False


def release(path: Path) -> None:
    """Only a lock this process holds: one taken over meanwhile is someone else's."""
    holder = read_holder(path, patience=0.0)
    if holder is not None and (holder.pid, holder.host) == (os.getpid(), socket.gethostname()):
        path.unlink(missing_ok=True)


# Folders whose lock this process took for the whole command, before anything was written there (a
# run's before Hydra's record, a sweep's before multirun.yaml): their lock files, by folder.
HELD: dict[Path, Path] = {}


def hold(folder: Path) -> None:
    """Lock ``folder`` until ``release_held``: from the check that it holds no run to the run's end."""
    key = folder.resolve()
    if key not in HELD:
        HELD[key] = acquire(folder)


def release_held(folder: Path | None = None) -> None:
    """The lock this process holds on ``folder`` (on every folder: None), released."""
    for key in [key for key in HELD if folder is None or key == folder.resolve()]:
        release(HELD.pop(key))


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Held while the body writes ``run_dir``; released however it ends (an error, a signal's exit). A
    folder this process holds already (``hold``) stays held by its holder."""
    if run_dir.resolve() in HELD:
        yield
        return
    path = acquire(run_dir)
    try:
        yield
    finally:
        release(path)
