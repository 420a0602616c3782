"""One GPU per parallel job: jobs of a sweep that run at the same time on one machine (the joblib
launcher) each claim a GPU that no other running job of the sweep holds, by an exclusive lock on a file
per GPU (``<sweep dir>/.gpus/<index>.lock``). The lock belongs to the job's open file: a job that ends,
fails or is killed frees its GPU, and the next job takes it."""

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def claimed_gpu(sweep_dir: Path, count: int, job: int, use: Callable[[int], None]) -> Iterator[int]:
    """Claim one of ``count`` GPUs for job ``job`` and ``use`` it (``torch.cuda.set_device``) while the
    job runs. Each job tries its own first (job number modulo count), then the others; with more jobs
    at once than GPUs (every lock held), the job shares its own."""
    folder = sweep_dir / ".gpus"
    folder.mkdir(parents=True, exist_ok=True)
    held: IO[str] | None = None
    index = job % count
    for candidate in [(job + offset) % count for offset in range(count)]:
        handle = open(folder / f"{candidate}.lock", "a")  # noqa: SIM115 (held while the job runs)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        held, index = handle, candidate
        break
    try:
        use(index)
        yield index
    finally:
        if held is not None:
            held.close()  # closing the file releases its lock
