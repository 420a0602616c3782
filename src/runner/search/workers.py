"""The search's slots: up to ``count`` jobs run at once, and the moment one ends the next starts, so
no slot waits for the slowest job of a batch (Hydra's launchers take batches and return when every
job of one has ended; each slot hands them a batch of one). One slot runs its jobs in this thread:
a launcher that runs jobs in this process (Hydra's basic one) needs the main thread's signals."""

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

# Runs job ``number`` with these overrides to its end; whether it failed without leaving a result.
Launch = Callable[[list[str], int], bool]


class Later:
    """No job to start now, but one may be soon (another process holds it): ask again shortly."""


LATER = Later()
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Job:
    number: int  # its job directory's number
    overrides: list[str]
    trial: Any  # the study's trial the job runs


def run_in_slots(
    count: int, next_job: Callable[[], Job | Later | None], launch: Launch, ended: Callable[[Job, bool], None]
) -> None:
    """Start jobs from ``next_job`` (None: start no more; ``LATER``: none now) in ``count`` slots until
    none remain or run; ``ended`` hears of each job as it ends, in this thread (the study is asked
    and told from here only)."""
    if count == 1:
        while (job := next_job()) is not None:
            if isinstance(job, Later):
                time.sleep(POLL_SECONDS)
                continue
            ended(job, launch(job.overrides, job.number))
        return
    pool = ThreadPoolExecutor(count, thread_name_prefix="search-slot")
    running: dict[Future[bool], Job] = {}
    try:
        while True:
            job: Job | Later | None = LATER
            while len(running) < count and isinstance(job := next_job(), Job):
                running[pool.submit(launch, job.overrides, job.number)] = job
            if not running and job is None:
                return
            if not running:
                time.sleep(POLL_SECONDS)
                continue
            timeout = POLL_SECONDS if isinstance(job, Later) else None
            done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda future: running[future].number):
                ended(running.pop(future), future.result())
    except BaseException:  # a second Ctrl-C: leave at once, the jobs' own handlers end them
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown()
