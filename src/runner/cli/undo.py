"""Undoing what Hydra writes before a task starts (its record of the invocation, the log file), for a
run refused at its start: a refused run leaves no run directory, and a refused resume leaves the run
directory it names as it was."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# What Hydra writes into a new run directory before the task runs.
HYDRA_RECORD = {"config.yaml", "hydra.yaml", "overrides.yaml"}


@dataclass(frozen=True)
class ResumedRunDir:
    """A run directory as it was before a resume wrote into it: Hydra adds ``record`` and appends to
    the log."""

    run_dir: Path
    record: Path
    log_size: int | None  # None: there was no log
    run_record: int | None  # run.yaml's modification time: it changes once the run writes

    @classmethod
    def before(cls, run_dir: Path, record: str, log_name: str = "train.log") -> "ResumedRunDir":
        log, run_record = run_dir / log_name, run_dir / "run.yaml"
        return cls(
            run_dir, run_dir / record, log.stat().st_size if log.is_file() else None,
            run_record.stat().st_mtime_ns if run_record.is_file() else None,
        )  # fmt: skip

    def untouched(self) -> bool:
        """Whether the resumed run has not begun writing (then its log lines are only Hydra's)."""
        run_record = self.run_dir / "run.yaml"
        return (run_record.stat().st_mtime_ns if run_record.is_file() else None) == self.run_record

    def restore(self, log_name: str = "train.log") -> None:
        shutil.rmtree(self.record, ignore_errors=True)
        log = self.run_dir / log_name
        if self.log_size is None:
            log.unlink(missing_ok=True)
        elif log.is_file() and log.stat().st_size > self.log_size:
            os.truncate(log, self.log_size)


def holds_only_hydra_files(run_dir: Path) -> bool:
    if not run_dir.is_dir():
        return False
    names = {path.name for path in run_dir.iterdir()}
    logs = {name for name in names if name.endswith(".log") and (run_dir / name).is_file()}
    record = run_dir / ".hydra"
    if not names - logs <= {".hydra"}:
        return False
    return not record.exists() or {path.name for path in record.iterdir()} <= HYDRA_RECORD


def remove_new_run_dir(run_dir: Path, outputs: Path) -> None:
    """Remove a run directory that holds only what Hydra wrote before the task, and the folders above
    it inside ``outputs`` that are left empty (``outputs/<date>``, ``outputs`` itself)."""
    if not holds_only_hydra_files(run_dir):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    outputs = outputs.resolve()
    folder = run_dir.resolve().parent
    while folder == outputs or outputs in folder.parents:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            return
        folder = folder.parent
