"""Restarts under ``torchrun --max-restarts=N``: when a worker dies, torchrun's agent stops the others
and starts the whole group again with the same command line (``TORCHELASTIC_RESTART_COUNT`` counts
the restarts). A restarted group continues the run it was training, as a requeued SLURM job does:
into the first attempt's run directory (and so its TensorBoard run) from the newest valid checkpoint
there (``resume=auto``); a resumed run is bit-identical to one never interrupted.

The first attempt's rank 0 notes its run directory under ``outputs/.torchrun/<TORCHELASTIC_RUN_ID>``
when the command line names none (a restart cannot know a timestamped directory otherwise)."""

import os
import sys
from pathlib import Path

from runner.cli.arguments import CommandLine
from runner.experiment.run_files import EVENTS_PREFIX

RECORDS = ".torchrun"


def restart_count() -> int:
    """0 on torchrun's first start of the group (and without torchrun), then 1, 2, ..."""
    text = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return int(text) if text.isdigit() else 0


def record_of(parent: str) -> Path:
    run_id = "".join(
        c if c.isalnum() or c in "-_." else "_" for c in os.environ.get("TORCHELASTIC_RUN_ID", "")
    )
    return Path(parent) / RECORDS / (run_id.lstrip(".") or "none")


def first_attempt_dir(parent: str) -> str | None:
    """At a restart, on every rank: the run directory rank 0 noted at the first attempt (a collective)."""
    import torch.distributed as torch_dist  # here: only under torchrun

    noted = [None]
    if torch_dist.get_rank() == 0:
        record = record_of(parent)
        noted[0] = record.read_text().strip() or None if record.is_file() else None
    torch_dist.broadcast_object_list(noted, src=0)
    return noted[0]


def note_run_dir(parent: str, run_dir: str) -> None:
    """At the first attempt, rank 0: where a restart continues."""
    record = record_of(parent)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(run_dir + "\n")


def continuing(command_line: CommandLine, run_dir: str, rank: int) -> CommandLine:
    """The restarted group's command line: ``resume=auto`` in place of any ``resume=`` given (the run
    continues from its own newest checkpoint, not from the one it started from); rank 0 keeps Hydra's
    record of this start beside the first one's. Rank 0 says so in one line."""
    for override in command_line.overrides:
        if override.key_or_group == "resume":
            command_line = command_line.without(override.input_line)
    command_line = command_line.plus("resume=auto")
    if rank != 0:
        return command_line
    print(f"runner: {restart_line(Path(run_dir))}", file=sys.stderr, flush=True)
    return command_line.plus(f"hydra.output_subdir=.hydra/restart-{restart_count()}")


def restart_line(run_dir: Path) -> str:
    restarts = restart_count()
    most = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "?")
    start = f"torchrun restart {restarts} (of --max-restarts={most}): continuing the run in {run_dir}"
    step = newest_checkpoint_step(run_dir)
    if step is None:
        return f"{start}; it has no checkpoint yet: it starts again from step 0"
    reached = last_logged_step(run_dir)
    redone = (
        f"; the interrupted attempt had logged step {reached}: {reached - step} "
        f"step{'' if reached - step == 1 else 's'} redone"
        if reached is not None and reached >= step
        else ""
    )
    return f"{start} from its newest checkpoint (step {step}){redone}"


def newest_checkpoint_step(run_dir: Path) -> int | None:
    """The newest checkpoint's step, read without its tensors (memory-mapped); None without one. The run
    itself checks and loads it (``resume=auto``), and takes an older one if it is not valid."""
    import torch

    from runner.checkpoint.files import CHECKPOINT_DIR, RECORD, checkpoint_files

    for path in checkpoint_files(run_dir / CHECKPOINT_DIR):
        file = path / RECORD if path.is_dir() else path
        try:
            step = torch.load(file, map_location="cpu", weights_only=True, mmap=True)["global_step"]
        except Exception:  # a damaged file: the run names it when it skips it
            continue
        if isinstance(step, int):
            return step
    return None


def last_logged_step(run_dir: Path) -> int | None:
    """The highest step in the newest event file that holds one: where the interrupted attempt got to
    (at its log steps)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from runner.observe.hparams import HPARAMS_FILE

    files = [p for p in run_dir.glob(f"{EVENTS_PREFIX}*") if p.name != HPARAMS_FILE and p.is_file()]
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        steps = [event.step for event in EventFileLoader(str(path)).Load() if event.HasField("summary")]
        if steps:
            return max(steps)
    return None
