"""Restarts under ``torchrun --max-restarts=N``: when a worker dies, torchrun's agent stops the others
and starts the whole group again with the same command line (``TORCHELASTIC_RESTART_COUNT`` counts
the restarts). A restarted group continues the run it was training, as a requeued SLURM job does:
into the first attempt's run directory (and so its TensorBoard run) from the newest valid checkpoint
there (``resume=auto``); a resumed run is bit-identical to one never interrupted.

The first start's run directory outlives its workers in torchrun's agent store (the store the
workers meet in, which the agent keeps across restarts): a restart reads it there, so a timestamped
directory is found again without a file of its own."""

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from runner.cli.arguments import CommandLine
from runner.experiment.run_files import EVENTS_PREFIX

KEY = "runner/run_dir"  # in the agent store, beside the process group's keys (under default_pg...)


def restart_count() -> int:
    """0 on torchrun's first start of the group (and without torchrun), then 1, 2, ..."""
    text = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return int(text) if text.isdigit() else 0


def agent_store() -> Any:
    """torchrun's agent store (a ``torch.distributed.Store``, torch imported here only), or None where
    the workers host it themselves (it dies with them)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    import torch.distributed as torch_dist

    store, _, _ = next(torch_dist.rendezvous("env://", timeout=timedelta(seconds=60)))
    return store


def run_dir_across_restarts(
    named: str | None, sweep: bool, shared: Callable[[str | None], str]
) -> tuple[str, bool]:
    """The run directory (``shared``: rank 0's for every rank) and whether the group continues a run
    there: at a restart, the first start's (the one named, or the one noted in the agent store); at the
    first start, the new one is noted. A sweep (its jobs continue themselves) is left as it is."""
    restarted = restart_count() > 0 and not sweep
    store = agent_store() if not sweep and not named else None
    noted = store.get(KEY).decode() if restarted and store is not None and store.check([KEY]) else None
    run_dir = shared(named or noted)
    if store is not None and not restarted:
        store.set(KEY, run_dir)
    if restarted and not (named or noted) and os.environ.get("RANK") == "0":
        print(
            f"runner: warning: torchrun restart {restart_count()}: the first start's run directory is not "
            f"known here (no agent store); a new run starts in {run_dir}; give hydra.run.dir=DIR to "
            "continue one run across restarts",
            file=sys.stderr,
        )  # fmt: skip
    return run_dir, restarted and bool(named or noted)


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
