"""Whether a checkpoint may continue this run: the settings that change the math must match, and so
must the number of processes. Which settings those are is declared in the schema."""

import copy
import logging
from pathlib import Path
from typing import Any

from runner.checkpoint.files import CheckpointError
from runner.config.errors import show
from runner.config.schema import resume_policy
from runner.config.typed import flatten
from runner.training.schedules import named_schedule

log = logging.getLogger("runner")
ABSENT = "<absent>"


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
