"""The resume point, a run's first phase: the checkpoint it continues (if any), whether that checkpoint
may continue it (the settings that change the math must match, and so must the number of processes;
which settings those are is declared in the schema), whether anything is left to train, and the seed."""

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.checkpoint.files import CheckpointError
from runner.checkpoint.locate import Found, locate_checkpoint, own_checkpoint
from runner.config.errors import show
from runner.config.schema import RunConfig, resume_policy
from runner.config.typed import as_dict, flatten
from runner.training.distributed import ProcessInfo, in_submitit_job
from runner.training.schedules import named_schedule
from runner.training.seeding import draw_seed

log = logging.getLogger("runner")
ABSENT = "<absent>"


class NothingToTrain(Exception):
    """The checkpoint resumed from has already reached the end this run asks for: nothing is trained and
    nothing written. Not an error: the command says so in one line (the message) and exits 0."""


@dataclass(frozen=True)
class ResumePoint:
    """Where a run starts: the checkpoint it continues (``None``: from scratch) and its seed (the
    checkpoint's, the config's, or drawn)."""

    found: Found | None
    seed: int

    @property
    def checkpoint(self) -> dict[str, Any] | None:
        return self.found.checkpoint if self.found else None

    @property
    def path(self) -> Path | None:
        return self.found.path if self.found else None


def resume_point(config: RunConfig, run_dir: Path, given: Found | None, process: ProcessInfo) -> ResumePoint:
    """The checkpoint to continue, refused (before anything is built) if it would change the run's math
    or has nothing left to train; ``given``: one the command line found and loaded already."""
    found = checkpoint_to_resume(config, run_dir, given)
    if found is None:
        return ResumePoint(None, draw_seed() if config.seed is None else config.seed)
    checkpoint = found.checkpoint
    plain_config = as_dict(config)
    check_resume_compatible(checkpoint["config"], plain_config, found.path)
    check_world_size(checkpoint["world_size"], process.world_size, found.path, config.resume_reshard)
    check_not_finished(config, plain_config, checkpoint, found.path)
    return ResumePoint(found, checkpoint["seed"])


def checkpoint_to_resume(config: RunConfig, run_dir: Path, given: Found | None) -> Found | None:
    """A submitit job that finds a checkpoint in its own directory was requeued: it continues from
    there. Else the one the command line found (and loaded), or the one ``resume=`` names."""
    if config.resume == "auto" or in_submitit_job():
        own = own_checkpoint(run_dir)
        if own is not None or config.resume == "auto":
            return own
    if given is not None or config.resume is None:
        return given
    return locate_checkpoint(config.resume, Path.cwd() / "outputs")


def check_not_finished(
    config: RunConfig, plain_config: dict[str, Any], checkpoint: dict[str, Any], path: Path
) -> None:
    """A checkpoint at or past the end the config asks for, or one a callback ended (early stopping)
    while the callbacks' settings are unchanged, has nothing left to train."""
    max_steps, max_epochs = config.trainer.max_steps, config.trainer.max_epochs
    step, epoch = checkpoint["global_step"], checkpoint["epoch"]
    if max_steps is not None and step >= max_steps:
        raise NothingToTrain(
            f"nothing to train: {path} already reached step {step} of {max_steps} "
            f"(trainer.max_steps={max_steps}); raise trainer.max_steps to train longer"
        )
    if max_epochs is not None and epoch >= max_epochs:
        raise NothingToTrain(
            f"nothing to train: {path} already reached epoch {epoch} of {max_epochs} "
            f"(trainer.max_epochs={max_epochs}); raise trainer.max_epochs to train longer"
        )
    reason = checkpoint["stop_reason"]
    if reason and checkpoint["config"].get("callbacks") == plain_config["callbacks"]:
        raise NothingToTrain(
            f"nothing to train: {path} was ended at step {step} by a callback ({reason}); change the "
            "callbacks' settings (callbacks.*, e.g. a larger patience) to train on"
        )


def check_resume_compatible(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse a resumed config that would change the math of the run so far, the model's settings
    included (a changed dropout fits the saved weights and still changes the math)."""
    saved_flat, current_flat = flatten(comparable(saved)), flatten(comparable(current))
    changed = [
        f"{key} ({show(saved_flat.get(key, ABSENT))} -> {show(current_flat.get(key, ABSENT))})"
        for key in sorted(saved_flat.keys() | current_flat.keys())
        if saved_flat.get(key) != current_flat.get(key) and resume_policy(key) == "same"
    ]
    if changed:
        raise CheckpointError(
            f"resume={path}: these settings differ from the run being resumed and would change its "
            f"math: {', '.join(changed)}; resume with the original values, or start a new run"
        )


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """Settings as the run uses them: a named schedule with its defaults filled in (``scheduler=cosine``
    and ``scheduler=cosine scheduler.warmup_steps=0`` are one schedule); a run from before
    ``data.sample_seeds`` with the draws it had."""
    config = copy.deepcopy(config)
    scheduler = config.get("scheduler")  # a forged checkpoint's config may lack it: then it differs
    if isinstance(scheduler, dict) and "_target_" not in scheduler:
        config["scheduler"] = named_schedule(scheduler)
    data = config.get("data")
    if isinstance(data, dict):  # saved before data.sample_seeds existed: its data sets drew as false does
        data.setdefault("sample_seeds", False)
    return config


def check_world_size(saved: int, current: int, path: Path, reshard: bool = False) -> None:
    """The data each process reads depends on the world size: another one continues the run, but not
    as it would have gone; only when asked (``resume_reshard=true``), and then with a warning."""
    if saved == current:
        return
    if not reshard:
        raise CheckpointError(
            f"resume={path}: saved by {saved} process(es), resumed with {current}; "
            "the data order depends on the world size: resume with the same number, or set "
            "resume_reshard=true to continue anyway (the data order then differs)"
        )
    log.warning(
        "resume_reshard=true: %s was saved by %d process(es) and continues on %d; the weights and "
        "optimizer state are re-sharded, but the data order differs from the interrupted run's",
        path, saved, current,
    )  # fmt: skip


def check_planned_values(
    scheduler: dict[str, Any], saved: dict[str, int | None], current: dict[str, int | None], path: Path
) -> None:
    """A scheduler built from the run's planned values (``${total_steps}``) keeps them in its state: a
    resumed run with another plan (a longer ``trainer.max_steps``) would step past its end."""
    used = [name for name in current if any(f"${{{name}}}" in str(value) for value in scheduler.values())]
    changed = [f"{name} {saved[name]} -> {current[name]}" for name in used if saved[name] != current[name]]
    if changed:
        raise CheckpointError(
            f"resume={path}: the scheduler was built for the run's planned {', '.join(changed)}; "
            "resume with the original trainer.max_steps / trainer.max_epochs, or start a new run"
        )
