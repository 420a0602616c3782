"""A submitit job's tasks run as one distributed run, a rank per task, as under torchrun."""

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def submitit_tasks_as_ranks(run_dir: Path) -> Iterator[None]:
    """Joins the tasks (see ``join_submitit_tasks``). Hydra has already set up each task's logging by
    then, so the other ranks' is redone here as torchrun's gets it from overrides: warnings and errors
    only, to ``train.rank<N>.log``."""
    from runner.training.distributed import join_submitit_tasks, stop_process_group

    if not join_submitit_tasks():
        yield
        return
    rank = int(os.environ["RANK"])
    if rank != 0:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
            rank_file = logging.FileHandler(run_dir / f"train.rank{rank}.log")
            rank_file.setFormatter(handler.formatter)
            root.addHandler(rank_file)
        for handler in root.handlers:  # also for loggers with levels of their own (submitit's)
            handler.setLevel(logging.WARNING)
    try:
        yield
    finally:
        stop_process_group()
