"""Which sweeper process runs which job of a search: several processes (the same command in N
terminals, a SLURM job array, hosts sharing the sweep folder) work through one study, each job run by
one of them. A process claims job ``n`` by an exclusive lock on ``<sweep dir>/.jobs/<n>.lock`` and
holds it while the job runs; the lock belongs to the process's open file, so a process that ends, or
is SIGKILLed, frees its jobs, and the next process to try takes over the job (its trial, continued
from its ``last.pt``). A job whose lock another process holds is live: it is left alone.

This is runner's rule of liveness for every storage: Optuna's journal file has no heartbeat, and an
RDB's heartbeat is kept only inside ``Study.optimize``. On a network filesystem it needs locks that
reach the server (Linux's NFS client turns ``flock`` into POSIX locks; Lustre mounts with ``-o flock``)."""

import fcntl
from pathlib import Path
from typing import IO

FOLDER = ".jobs"


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
        handle = open(self.folder / f"{number}.lock", "a")  # noqa: SIM115 (held while the job runs)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
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
