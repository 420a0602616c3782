"""The run plan: what a run is about to do, printed at its start and kept in TensorBoard.

It answers what a person checks first (which model, how many parameters, how much data, which
optimizer, schedule and loss), then how the run will go. Rows stay within 100 characters; a row that
says nothing on this device is left out.
"""

import functools
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import torch

from runner.config.errors import show
from runner.config.schema import CheckpointConfig, RunConfig
from runner.data.loading import is_stream
from runner.experiment.assembly import Assembly
from runner.experiment.profiling import profile_plan
from runner.training.batches import ModelLoss
from runner.training.modes import kept_modes_line, set_apart
from runner.training.named_optimizers import NamedOptimizers
from runner.training.precision import Precision
from runner.training.reduction import sums_its_loss

WIDTH = 100
NAME_WIDTH = 16
UNWRAPPED = {"resumed from", "re-applied", "run dir", "watch", "profile"}  # paths, commands, overrides: whole


def own_class(thing: Any) -> type:
    """The class the user built: a module ``fully_shard`` made an ``FSDP<Name>`` of is still one."""
    cls = type(thing)
    if cls.__bases__ and cls.__name__ == f"FSDP{cls.__bases__[-1].__name__}":
        return cls.__bases__[-1]
    return cls


def named(thing: Any, target: str | None) -> str:
    """``Sequential (runner.models.mlp)``: the class built, and the ``_target_`` that built it when
    that says more."""
    name = thing.__name__ if inspect.isroutine(thing) else own_class(thing).__name__
    if target and (name.startswith("_") or isinstance(thing, functools.partial)):
        return target  # a wrapper (``_partial_: true``): the target says what it is
    return name if not target or target.rsplit(".", 1)[-1] == name else f"{name} ({target})"


def model_plan(model: torch.nn.Module, target: str | None) -> str:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    trainable_part = "all trainable" if trainable == total else f"{trainable:,} trainable"
    return f"{named(model, target)}: {total:,} parameters, {trainable_part}"


def size_text(count: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} B"


def memory_plan(model: torch.nn.Module, world_size: int) -> str:
    """What each process holds of the parameters: its shards under FSDP (a DTensor's local part), else
    all of them (gradients and optimizer state follow the same split)."""
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    local = sum(
        (p.to_local() if hasattr(p, "to_local") else p).numel() * p.element_size() for p in model.parameters()
    )
    if local < whole:
        share = f"sharded over {world_size} processes, of {size_text(whole)} in all"
    elif world_size > 1:
        share = "a whole copy on each process"
    else:
        share = "one process"
    return f"parameters {size_text(local)} per process ({share})"


def samples(dataset: Any) -> str:
    if hasattr(dataset, "__len__"):
        return f"{len(dataset):,} samples"
    return f"a stream ({type(dataset).__name__})"


def data_plan(train_set: Any, val_set: Any, steps_per_epoch: int | None) -> str:
    sized = hasattr(train_set, "__len__") and hasattr(val_set, "__len__")
    if sized:
        sizes = f"{len(train_set):,} train, {len(val_set):,} validation samples"
    else:
        sizes = f"train: {samples(train_set)}, validation: {samples(val_set)}"
    per_epoch = (
        f"{steps_per_epoch:,} optimizer steps per epoch" if steps_per_epoch is not None
        else "epochs are passes over the stream"
    )  # fmt: skip
    return f"{sizes}; {per_epoch}"


def optimizer_plan(optimizer: torch.optim.Optimizer, target: str | None) -> str:
    if isinstance(optimizer, NamedOptimizers):  # optimizers: each over a part, with its own clip
        return "; ".join(
            f"{name}: {optimizer_plan(one, None)}, clip {show(optimizer.clips[name])}"
            for name, one in optimizer.optimizers.items()
        )
    first = optimizer.param_groups[0]
    # A scheduler keeps the configured rate as ``initial_lr`` and has set ``lr`` to its first value.
    lr, own = first.get("initial_lr", first["lr"]), ""
    rates = {group.get("initial_lr", group["lr"]) for group in optimizer.param_groups}
    if len(rates) > 1 and "lr" in optimizer.defaults:  # optimizer.param_groups: group 0's is not optimizer's
        first, lr, own = optimizer.defaults, optimizer.defaults["lr"], " (each group's below)"
    decay = f", weight decay {first['weight_decay']:g}" if "weight_decay" in first else ""
    return f"{named(optimizer, target)}, lr {lr:g}{own}{decay}"


def own_step_plan(optimizer: NamedOptimizers) -> str:
    """A model that writes its own step: runner runs it, and its optimizers are stepped by name."""
    return f"the model's training_step(batch, step), updating by name: {', '.join(optimizer.optimizers)}"


def parameter_groups(optimizer: torch.optim.Optimizer, model: torch.nn.Module | None = None) -> list[str]:
    """Each group's tensors and parameters, and its weight decay: what ``optimizer.no_decay`` did. With
    the model (``optimizer.param_groups`` or ``freeze`` set), each group's rate too, and the frozen."""
    groups = []
    for index, group in enumerate(optimizer.param_groups):
        tensors, count = len(group["params"]), sum(p.numel() for p in group["params"])
        lr = f", lr {group.get('initial_lr', group['lr']):g}" if model is not None else ""
        decay = f", weight_decay {group['weight_decay']:g}" if "weight_decay" in group else ""
        plural = "tensor" if tensors == 1 else "tensors"
        groups.append(f"{group.get('name', index)}: {tensors} {plural}, {count:,} parameters{lr}{decay}")
    frozen = [p for p in model.parameters() if not p.requires_grad] if model is not None else []
    if frozen:
        plural = "tensor" if len(frozen) == 1 else "tensors"
        groups.append(f"frozen: {len(frozen)} {plural}, {sum(p.numel() for p in frozen):,} parameters")
    return groups


def schedule_plan(scheduler: dict[str, Any], counted: bool = False) -> str:
    """``counted``: a scheduler stepped as timm's loop steps it (training/schedules.py)."""
    if counted:
        metric = f", {scheduler['monitor']}" if scheduler.get("monitor") else ""
        return (
            f"{scheduler['_target_']}, as timm's loop steps it: step_update(num_updates) after each "
            f"optimizer step, step(epoch{metric}) after each epoch"
        )
    if "_target_" not in scheduler:
        warmup = scheduler.get("warmup_steps", 0)
        return f"{scheduler['name']}, per optimizer step" + (f", {warmup} warmup steps" if warmup else "")
    if scheduler.get("monitor"):
        return f"{scheduler['_target_']}, after each validation on {scheduler['monitor']}"
    interval = scheduler.get("interval", "step")
    return f"{scheduler['_target_']}, per {'optimizer step' if interval == 'step' else 'epoch'}"


def checkpoint_plan(policy: CheckpointConfig, sharded: bool = False) -> str:
    """Sharded checkpoints (strategy=fsdp) are folders of the same names."""
    if not policy.enabled:
        return "none (checkpoint.enabled=false: a stopped run cannot be resumed)"
    cadences = (("step", policy.every_n_steps), ("epoch", policy.every_n_epochs))
    cadence = [
        f"every {unit}" if every == 1 else f"every {every} {unit}s" for unit, every in cadences if every
    ]
    suffix = "/" if sharded else ".pt"
    best = f", best{suffix} on {policy.monitor} ({policy.mode})" if policy.save_best else ""
    background = ", written in the background" if policy.async_save else ""
    kind = f", sharded folders{background}" if sharded else ""
    trained = "; the trained weights only, the frozen ones by their sha256" if policy.trainable_only else ""
    return (
        f"{' and '.join(cadence) or 'no periodic saves'} (newest {policy.keep_last} kept){best}, "
        f"last{suffix}{kind}{trained}"
    )


def loss_plan(loss_fn: Callable, loss: dict[str, Any]) -> str:
    if isinstance(loss_fn, ModelLoss):
        return "the model's own (loss=from_model)"
    return named(loss_fn, loss.get("_target_"))


def summed_plan(loss_fn: Callable, model: torch.nn.Module) -> str:
    """A summed loss (``training/reduction.py``) is accumulated as a sum and logged per sample."""
    return (
        "; a sum over samples: accumulated as one, logged per sample" if sums_its_loss(loss_fn, model) else ""
    )


def precision_plan(precision: Precision) -> str:
    if precision.fallback_reason:
        return f"{precision.used} (requested {precision.requested}: {precision.fallback_reason})"
    return precision.used


def order_plan(config: RunConfig, train_set: Any) -> str:
    """How the training set is ordered each epoch."""
    if is_stream(train_set):
        return "a stream, read in its own order"
    if config.data.sampler is not None:
        return f"data.sampler={config.data.sampler['_target_']}"
    if config.data.shuffle:
        return "shuffled: randperm(seed + epoch)"
    return "in the data set's order (data.shuffle=false)"


def loading_plan(config: RunConfig, train_set: Any) -> str:
    """Who reads the data (this process or its workers, how far ahead), and what a sample draws from."""
    data = config.data
    draws = (
        "each sample draws from its own seed (data.sample_seeds)"
        if data.sample_seeds and not is_stream(train_set)
        else "the workers' draws seeded per worker"
        if data.num_workers
        else "draws from the run's generators"
    )
    if data.num_workers == 0:
        return f"in this process (data.num_workers=0); {draws}"
    ahead = 2 if data.prefetch_factor is None else data.prefetch_factor
    kept = "started afresh each pass (a stream)" if is_stream(train_set) else (
        "kept between epochs" if data.persistent_workers else "started afresh each epoch"
    )  # fmt: skip
    return (
        f"{data.num_workers} worker process{'es' if data.num_workers > 1 else ''} (data.num_workers), "
        f"{ahead} batches each read ahead "
        f"(data.prefetch_factor), {kept} (data.persistent_workers); {draws}"
    )


def rows_of(built: Assembly) -> list[tuple[str, str | list[str]]]:
    config, parts, device, state = built.config, built.prepared.parts, built.device, built.state
    model, optimizer, world_size = parts.model, built.optimizer, built.process.world_size
    batch_size, accumulate = config.data.batch_size, config.accumulate
    limits = f"max_steps={show(config.trainer.max_steps)}, max_epochs={show(config.trainer.max_epochs)}"
    by_name = bool(config.freeze or config.optimizer.get("param_groups"))
    groups = parameter_groups(optimizer, model if by_name else None)
    notes, speed_notes = built.spread.notes, built.speed.notes
    run_dir, found = built.run_dir, built.start.found
    reapplied = found.reapplied if found else ()  # a resume's overrides taken again from the run's record
    profile = profile_plan(config.profile, run_dir, device, built.total_steps, state.step)
    return [
        ("model", model_plan(model, config.model.get("_target_"))),
        *([("modes", kept_modes_line(kept))] if (kept := set_apart(model)) else []),
        ("data", data_plan(parts.train_set, parts.val_set, built.planned["steps_per_epoch"])),
        ("loss", loss_plan(parts.loss_fn, config.loss) + summed_plan(parts.loss_fn, model)),
        ("optimizer", optimizer_plan(optimizer, config.optimizer.get("_target_"))),
        *([("step", own_step_plan(optimizer))] if isinstance(optimizer, NamedOptimizers) else []),
        *([("parameter groups", groups)] if len(groups) > 1 or by_name else []),
        ("schedule", schedule_plan(config.scheduler, built.schedule.counted)),
        ("device", str(device)),
        *([("strategy", notes["strategy"])] if "strategy" in notes else []),
        ("memory", memory_plan(model, world_size)),
        *([("activation ckpt", notes["recomputed"])] if "recomputed" in notes else []),
        ("precision", precision_plan(built.prepared.precision)),
        ("seed", str(built.start.seed) + (" (drawn)" if config.seed is None else "")),
        ("data order", order_plan(config, parts.train_set)),
        ("data loading", loading_plan(config, parts.train_set)),
        (
            "effective batch",
            f"{batch_size * accumulate * world_size} = {batch_size} (data.batch_size) x "
            f"{accumulate} (accumulate) x {world_size} {'process' if world_size == 1 else 'processes'}",
        ),
        ("optimizer steps", f"{built.total_steps:,} planned ({limits})"),
        *([("metrics", ", ".join(f"val/{name}" for name in config.metrics))] if config.metrics else []),
        *([("callbacks", ", ".join(config.callbacks))] if config.callbacks else []),
        ("clip", f"max grad norm {config.clip:g}, after backward" if config.clip else "off (norms logged)"),
        ("checkpoints", checkpoint_plan(config.checkpoint, config.strategy == "fsdp")),
        *([("speed", "; ".join(speed_notes))] if speed_notes else []),
        *([("profile", profile)] if profile else []),
        *([("resumed from", f"{found.path} (step {state.step}, epoch {state.epoch})")] if found else []),
        *([("re-applied", packed(reapplied, WIDTH - NAME_WIDTH - 3))] if reapplied else []),
        ("run dir", str(run_dir)),
        ("watch", f"tensorboard --logdir {run_dir}"),
    ]


def packed(items: Sequence[str], width: int) -> list[str]:
    """Items (a resume's overrides) on lines of at most ``width`` characters, each item whole: a value
    with a space in it is not split into what would read as two overrides."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 1 + len(item) <= width:
            lines[-1] += " " + item
        else:
            lines.append(item)
    return lines


def run_plan(built: Assembly) -> str:
    """The plan of what the run built, as text: one row per item, long values wrapped at spaces under
    their column (not paths and commands, which are copied whole)."""
    lines = ["run plan"]
    width = WIDTH - NAME_WIDTH - 3
    for name, value in rows_of(built):
        parts = value if isinstance(value, list) else [value]
        if name in UNWRAPPED:
            wrapped = parts
        else:
            wrapped = [line for part in parts for line in textwrap.wrap(
                part, width, break_long_words=False, break_on_hyphens=False) or [""]]  # fmt: skip
        lines.append(f"  {name:<{NAME_WIDTH}} {wrapped[0]}")
        lines += [" " * (NAME_WIDTH + 3) + line for line in wrapped[1:]]
    return "\n".join(lines)
