"""Undoing what Hydra writes before a task starts (its record of the invocation, the log file), for a
run refused at its start: a refused run leaves no run directory, and a refused run in an existing
directory (a resume, ``hydra.run.dir=`` naming one) leaves it as it was."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from runner.experiment.lock import release_held

# What Hydra writes into a run directory before the task runs: its record, and the job's log.
HYDRA_RECORD = {"config.yaml", "hydra.yaml", "overrides.yaml"}
HYDRA_LOGS = ("train.log", "lr_find.log")


def is_hydra_log(path: Path) -> bool:
    return path.is_file() and (path.name in HYDRA_LOGS or (path.name.startswith("train.rank") and
                                                            path.suffix == ".log"))  # fmt: skip


@dataclass(frozen=True)
class RunDirBefore:
    """A run directory as it was before Hydra wrote into it."""

    run_dir: Path
    existed: bool
    names: frozenset[str]  # its entries
    record: dict[str, tuple[bytes, int]]  # .hydra/'s files and modification times: Hydra rewrites them
    run_record: int | None  # run.yaml's modification time: it changes once a run writes here
    nearest_existing: Path  # the folder above it that exists (empty ones made up to it are removed)

    @classmethod
    def of(cls, run_dir: Path) -> "RunDirBefore":
        run_dir = run_dir.resolve()
        hydra = run_dir / ".hydra"
        files = [path for path in hydra.iterdir() if path.is_file()] if hydra.is_dir() else []
        record = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in files}
        nearest = next(folder for folder in (run_dir, *run_dir.parents) if folder.exists())
        return cls(
            run_dir, run_dir.is_dir(), frozenset(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else
            frozenset(), record, mtime(run_dir / "run.yaml"), nearest,
        )  # fmt: skip

    def untouched(self) -> bool:
        """Whether no run has begun writing here since (then what changed is Hydra's)."""
        return mtime(self.run_dir / "run.yaml") == self.run_record

    def restore(self) -> None:
        if not self.existed:
            remove_new_run_dir(self.run_dir, keep=self.nearest_existing)
            return
        hydra = self.run_dir / ".hydra"
        if ".hydra" not in self.names:
            shutil.rmtree(hydra, ignore_errors=True)
        elif hydra.is_dir():
            for path in hydra.iterdir():  # a resume's record (.hydra/resume-<time>/), new files
                if path.name not in self.record:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            for name, (content, modified) in self.record.items():
                path = hydra / name
                if not path.is_file() or path.read_bytes() != content:
                    path.write_bytes(content)
                if path.stat().st_mtime_ns != modified:  # Hydra rewrote it, if only with the same bytes
                    os.utime(path, ns=(modified, modified))
        for name in {p.name for p in self.run_dir.iterdir()} - self.names:
            path = self.run_dir / name
            if is_hydra_log(path) and path.stat().st_size == 0:  # only Hydra's new, empty log
                path.unlink()


def mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


def holds_only_hydra_files(run_dir: Path) -> bool:
    if not run_dir.is_dir():
        return False
    entries = list(run_dir.iterdir())
    if any(path.name != ".hydra" and not is_hydra_log(path) for path in entries):
        return False
    record = run_dir / ".hydra"
    return not record.exists() or {path.name for path in record.iterdir()} <= HYDRA_RECORD


def remove_new_run_dir(run_dir: Path, keep: Path) -> None:
    """Remove a run directory that holds only what Hydra wrote before the task, and the folders above
    it, below ``keep``, that are left empty (``outputs/<date>`` and ``outputs`` below the working
    directory)."""
    release_held(run_dir)  # a lock this process took before Hydra wrote there
    if not holds_only_hydra_files(run_dir):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    keep = keep.resolve()
    folder = run_dir.resolve().parent
    while keep in folder.parents:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            return
        folder = folder.parent
