"""When and how a ``strategy=fsdp`` run saves: the same names and policy as plain checkpoints
(``step_<N>``, ``best``, ``last``, the newest ``keep_last`` periodic ones), as folders every process
writes its shards into (``sharded.py``). Every process calls the same saves at the same steps; rank 0
alone commits (renames) folders and removes old ones.

With ``checkpoint.async_save=true`` the loop pauses only while the shards are copied; writing, and rank
0's commit, go on in the background over a process group of their own, so they never interleave with
training's collectives. A new save waits for the one before.
"""

import copy
import logging
import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as torch_dist

from runner.checkpoint.durable import remove_stale_temporaries, writing
from runner.checkpoint.policy import SaveCadence, snapshot, stale_periodic
from runner.checkpoint.sharded import clean_folder, commit, link_folder, split_sharded, write_shards
from runner.checkpoint.state import TrainState

log = logging.getLogger("runner")
PERIODIC_FOLDER = re.compile(r"step_(\d+)")


@dataclass
class ShardedCheckpointer(SaveCadence):
    folder: Path
    payload: Callable[[TrainState], dict[str, Any]]  # the checkpoint's contents, shards as DTensors
    every_n_steps: int | None
    every_n_epochs: int | None
    keep_last: int
    save_best: bool
    rank: int
    background: bool = False  # checkpoint.async_save
    before_save: Callable[[], None] = lambda: None
    save_seconds: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    last_saved_step: int | None = None
    last_written: Path | None = None  # rank 0: the newest folder committed
    _saved: tuple[TrainState, Path] | None = None  # the moment last saved, and under which name
    _in_flight: Future | None = None
    _committer: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    _group: Any = None  # the background writes' own process group
    _failure: BaseException | None = None

    suffix = ""

    def __post_init__(self) -> None:
        """Rank 0 removes what a killed save left (and puts back a folder moved aside) before any process
        writes here."""
        if self.rank == 0:
            with writing(self.folder):
                self.folder.mkdir(parents=True, exist_ok=True)
                remove_stale_temporaries(self.folder)
                if removed := clean_folder(self.folder):
                    log.info("removed %d unfinished sharded save(s) in %s: %s",
                             len(removed), self.folder, ", ".join(removed))  # fmt: skip
        if self.background:
            self._group = torch_dist.new_group(backend="gloo")
        torch_dist.barrier()

    def temporary(self, name: str) -> Path:
        return self.folder / f".{name}.tmp"

    def save(self, state: TrainState, name: str, prune: bool = False) -> Path:
        started = time.perf_counter()
        final = self.folder / name
        if self._saved is not None and self._saved[0] == state:  # best and step_N of one moment
            self.settle()
            # Every process takes this branch alike; rank 0 links, unless that moment's save failed
            # (the failure is kept, and stops every process at this step).
            if self.rank == 0 and self._saved[1].is_dir():
                with writing(final):
                    link_folder(self._saved[1], self.temporary(name), final)
                    self.last_written = final
                    if prune:
                        self.prune(keep=final)
        else:
            self.before_save()
            self.settle()
            record, tensors = split_sharded(self.payload(state))
            record = snapshot(record)  # the plain part, copied: training goes on changing it
            temporary = self.temporary(name)
            with writing(final):
                written = write_shards(tensors, temporary, self.background, self._group)
            self._saved = (copy.deepcopy(state), final)
            self._in_flight = self._committer.submit(self._finish, written, record, temporary, final, prune)
            if not self.background:
                self.settle()
        self.save_seconds.append(time.perf_counter() - started)
        return final

    def _finish(
        self, written: Future | None, record: dict, temporary: Path, final: Path, prune: bool
    ) -> None:
        started = time.perf_counter()
        try:
            with writing(final):
                if written is not None:
                    written.result()
                if self.rank == 0:
                    commit(record, temporary, final)
                    self.last_written = final
                    if prune:
                        self.prune(keep=final)
        except BaseException as error:
            self._failure = error
            raise
        if self.background:
            self.write_seconds.append(time.perf_counter() - started)

    def settle(self) -> None:
        """Finish the save in flight without raising: a failed write (on rank 0 alone) is kept in
        ``failure()``, which the loop reads at the step boundary so that every process stops there."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.exception()

    def wait(self) -> None:
        """Finish the save in flight; a failed write, now or earlier, is raised here (the run ends)."""
        self.settle()
        if self._failure is not None:
            raise self._failure

    def failure(self) -> BaseException | None:
        return self._failure

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._committer.shutdown()

    def prune(self, keep: Path) -> None:
        """Rank 0, after ``keep`` (the new folder) is in place."""
        for path in stale_periodic(self.folder, PERIODIC_FOLDER, keep, self.keep_last):
            shutil.rmtree(path, ignore_errors=True)
