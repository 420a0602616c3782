"""What a process of a sweep holds while it works, claimed by an exclusive lock on a file in the sweep
folder: a job of a search (``<sweep dir>/.jobs/<n>.lock``), held by the sweeper process that runs it, and
a GPU (``<sweep dir>/.gpus/<index>.lock``), held by the parallel job that trains on it. The lock belongs
to the holder's open file, so a process that ends, fails or is SIGKILLed frees what it held, and the next
one to try takes it over.

For jobs this is runner's rule of liveness for every storage: several processes (the same command in N
terminals, a SLURM job array, hosts sharing the sweep folder) work through one study, each job run by one
of them; a job whose lock another process holds is live and left alone, one whose process died is taken
over (its trial, continued from its ``last.pt``). Optuna's journal file has no heartbeat, and an RDB's
heartbeat is kept only inside ``Study.optimize``. On a network filesystem it needs locks that reach the
server (Linux's NFS client turns ``flock`` into POSIX locks; Lustre mounts with ``-o flock``)."""

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

FOLDER = ".jobs"
GPU_FOLDER = ".gpus"


def try_lock(path: Path) -> IO[str] | None:
    """The open file ``path`` with this process's exclusive lock on it; None where another holds it."""
    handle = open(path, "a")  # noqa: SIM115 (held while the claim lasts)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


class JobClaims:
    """This process's claims on jobs of the sweep folder."""

    def __init__(self, sweep_dir: Path) -> None:
        self.folder = sweep_dir / FOLDER
        self.held: dict[int, IO[str]] = {}

    def claim(self, number: int) -> bool:
        """Take job ``number`` unless another process holds it; True when this process now does."""
        if number in self.held:
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        handle = try_lock(self.folder / f"{number}.lock")
        if handle is None:
            return False
        self.held[number] = handle
        return True

    def release(self, number: int) -> None:
        handle = self.held.pop(number, None)
        if handle is not None:
            handle.close()  # closing the file releases its lock

    def release_all(self) -> None:
        for number in list(self.held):
            self.release(number)


@contextmanager
def claimed_gpu(sweep_dir: Path, count: int, job: int, use: Callable[[int], None]) -> Iterator[int]:
    """One GPU per parallel job: claim one of ``count`` GPUs for job ``job`` (a job of a sweep that runs
    at the same time as others on one machine, the joblib launcher) and ``use`` it
    (``torch.cuda.set_device``) while the job runs. Each job tries its own first (job number modulo
    count), then the others; with more jobs at once than GPUs (every lock held), the job shares its own."""
    folder = sweep_dir / GPU_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    held: IO[str] | None = None
    index = job % count
    for candidate in [(job + offset) % count for offset in range(count)]:
        held = try_lock(folder / f"{candidate}.lock")
        if held is not None:
            index = candidate
            break
    try:
        use(index)
        yield index
    finally:
        if held is not None:
            held.close()  # closing the file releases its lock
