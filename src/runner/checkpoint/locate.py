"""Finding the checkpoint a ``resume=`` names, and the run it belongs to. A checkpoint is loaded
once: finding a valid one loads it, and the loaded one is what the run resumes from."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.checkpoint.files import (
    CHECKPOINT_DIR,
    CheckpointError,
    checkpoint_files,
    is_sharded_folder,
    load_checkpoint,
    written_at,
)
from runner.config.bounded_read import UnreadableRecord, read_plain
from runner.config.errors import ConfigError
from runner.config.job_dirs import numbered


@dataclass(frozen=True)
class Found:
    path: Path
    checkpoint: dict[str, Any]
    reapplied: tuple[str, ...] = ()  # the run's original overrides a resume takes again

    @property
    def run_dir(self) -> Path:
        return self.path.parent.parent


def checked_load(path: Path) -> dict[str, Any]:
    """A checkpoint file, or a sharded checkpoint's record once its index and shard files are checked."""
    if not is_sharded_folder(path):
        return load_checkpoint(path)
    from runner.checkpoint.sharded_checks import check_entries, check_folder  # torch.distributed: only here

    check_entries(path)  # plain files only, before its record is read
    checkpoint = load_checkpoint(path)
    check_folder(path, checkpoint)
    return checkpoint


def newest_valid(candidates: list[Path], request: str, key: str = "resume") -> Found | None:
    """The first candidate that loads; each one skipped is reported."""
    for path in candidates:
        try:
            return Found(path.resolve(), checked_load(path))
        except CheckpointError as error:
            print(f"runner: warning: {key}={request}: skipping {error}", file=sys.stderr)
    return None


def checkpoint_to_evaluate(path: Path) -> Path:
    """``eval ckpt=<run dir>`` (or its ``checkpoints/`` folder): the run's ``best.pt``, the one it kept
    for its monitored metric; without a valid one, its newest valid checkpoint, as a resume takes it.
    A checkpoint file (or a sharded checkpoint's folder) is itself."""
    path = numbered(path)
    if not path.is_dir() or is_sharded_folder(path):
        return path
    folder = path / CHECKPOINT_DIR if (path / CHECKPOINT_DIR).is_dir() else path
    candidates = checkpoint_files(folder)
    best = [candidate for candidate in candidates if candidate.stem == "best"]
    found = newest_valid(best + [c for c in candidates if c not in best], str(path), key="ckpt")
    if found is None:
        raise ConfigError(
            f"ckpt={path}: no valid checkpoint in {folder}; give a run directory or a checkpoint"
        )
    return found.path


def locate_checkpoint(request: str, outputs_dir: Path) -> Found:
    """The checkpoint ``resume=request`` names (``find_checkpoint``), in a run whose checkpoints can be
    written again."""
    return names_free(find_checkpoint(request, outputs_dir), f"resume={request}")


def names_free(found: Found, key: str) -> Found:
    """A resumed run replaces its ``last.pt`` and ``best.pt``: where a folder (or a FIFO, a device)
    holds one of those names, the run is refused before it trains, not when it saves at its end."""
    for name in SAVED_NAMES:
        path = found.run_dir / CHECKPOINT_DIR / name
        if (path.exists() or path.is_symlink()) and not (path.is_file() or is_sharded_folder(path)):
            raise ConfigError(
                f"{key}: {path} is not a file, and the resumed run saves its checkpoint there; move it "
                "away, then resume"
            )
    return found


SAVED_NAMES = ("last.pt", "best.pt")


def find_checkpoint(request: str, outputs_dir: Path) -> Found:
    """``latest`` (newest valid checkpoint of any run under ``outputs_dir``), a run directory (its
    newest valid checkpoint) or a checkpoint file (which must be valid)."""
    if request == "latest":
        folders = outputs_dir.glob(f"**/{CHECKPOINT_DIR}")
        candidates = sorted(
            (path for folder in folders for path in checkpoint_files(folder)), key=written_at, reverse=True
        )
        found = newest_valid(candidates, request)
        if found is None:
            raise ConfigError(f"resume=latest: no valid checkpoint under {outputs_dir}")
        return found
    shown = request if len(request) <= 120 else request[:100] + f"... ({len(request)} characters)"
    try:
        path = numbered(Path(request).expanduser())  # <sweep dir>/3: job 3, whatever else its name holds
        if path.is_file() or is_sharded_folder(path):
            if path.resolve().parent.name != CHECKPOINT_DIR:
                raise ConfigError(
                    f"resume={request}: the checkpoint is not in a run's {CHECKPOINT_DIR}/ folder; a "
                    f"checkpoint continues the run that wrote it: resume=<run dir> or "
                    f"<run dir>/{CHECKPOINT_DIR}/NAME"
                )
            return Found(path.resolve(), checked_load(path))
        if path.is_dir():
            folder = path / CHECKPOINT_DIR if (path / CHECKPOINT_DIR).is_dir() else path
            found = newest_valid(checkpoint_files(folder), request)
            if found is None:
                raise ConfigError(f"resume={request}: no valid checkpoint in {folder}")
            return found
    except OSError as error:
        raise ConfigError(f"resume={shown}: {error.strerror or error}") from None
    raise ConfigError(f"resume={shown}: no such checkpoint file or run directory")


def original_overrides(run_dir: Path) -> list[str]:
    """The command-line overrides the run was started with (and Hydra's search path), so a resume
    needs none of them repeated."""
    record = run_dir / ".hydra"
    if not (record / "overrides.yaml").is_file():
        raise ConfigError(
            f"resume: {run_dir} is not a runner run directory (no .hydra/overrides.yaml); "
            f"checkpoints are resumed from <run dir>/{CHECKPOINT_DIR}/"
        )
    try:
        overrides = read_plain(record / "overrides.yaml") or []
        hydra_record = (read_plain(record / "hydra.yaml") if (record / "hydra.yaml").is_file() else {}) or {}
        hydra_overrides = (
            hydra_record["hydra"].get("overrides", {}).get("hydra", []) if "hydra" in hydra_record else []
        )
    except UnreadableRecord as error:
        raise ConfigError(
            f"resume: {record} cannot be read ({error}); the run directory is damaged"
        ) from None
    except (OSError, AttributeError, TypeError) as error:
        raise ConfigError(
            f"resume: {record} cannot be read ({type(error).__name__}); the run directory is damaged"
        ) from None
    if not (isinstance(overrides, list) and isinstance(hydra_overrides or [], list)
            and all(isinstance(o, str) for o in [*overrides, *(hydra_overrides or [])])):  # fmt: skip
        raise ConfigError(
            f"resume: {record} is not Hydra's record of a command line; the run directory is damaged"
        )
    searchpath = [o for o in hydra_overrides or [] if o.startswith("hydra.searchpath=")]
    return [o for o in overrides if not o.startswith("resume=")] + searchpath


def own_checkpoint(run_dir: Path) -> Found | None:
    """``resume=auto``: this run directory's newest valid checkpoint, or None to start afresh. For jobs
    a scheduler reruns in the same directory (a requeued SLURM job, a fixed ``hydra.run.dir``)."""
    found = newest_valid(checkpoint_files(run_dir / CHECKPOINT_DIR), "auto")
    return names_free(found, "resume=auto") if found is not None else None
