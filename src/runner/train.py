"""One training run: set up from a validated config, build, print the plan, fit, record.

Hydra-free: ``_target_`` configs become objects through the ``build`` function handed in
(Hydra's ``instantiate`` in the app), so a run can also be started from plain Python.
"""

import json
import logging
import math
import signal
import statistics
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from torch.nn.parallel import DistributedDataParallel

import runner
from runner.checkpointing import PeriodicCheckpointer
from runner.checkpoints import (
    CHECKPOINT_DIR,
    CheckpointError,
    checkpoint_payload,
    load_checkpoint,
    restore_rng_states,
    restore_training,
)
from runner.checks import ConfigError, show
from runner.data.loading import make_loaders
from runner.device import resolve_device
from runner.distributed import ProcessInfo, from_environment, in_submitit_job
from runner.engine import Checkpointer, LoopSettings, NoCheckpoints, TrainState, fit, planned_steps
from runner.metrics import NullLogger, TensorBoardLogger
from runner.precision import Precision, resolve_precision
from runner.resume import own_checkpoint
from runner.runplan import run_plan
from runner.schedules import build_scheduler
from runner.seeding import draw_seed, seed_everything
from runner.signals import GracefulStop
from runner.speed import apply_speed_settings

log = logging.getLogger("runner")

# Settings a resumed run may change: none of them alters the math of the steps already taken.
RESUMABLE_CHANGES = (
    "trainer.max_steps", "trainer.max_epochs", "trainer.log_every_n_steps", "trainer.val_every_n_epochs",
    "trainer.val_every_n_steps", "checkpoint.", "resume", "device", "data.num_workers",
)  # fmt: skip


def build_component(build: Callable[..., Any], key: str, spec: dict, *args: Any) -> Any:
    """Build one ``_target_`` config. A target that cannot be imported or called with the config's
    arguments is a one-line error naming the key; an error raised inside user code keeps its
    traceback."""
    try:
        return build(spec, *args)
    except Exception as error:
        cause = error
        while cause.__cause__ is not None:  # Hydra wraps the error that says what went wrong
            cause = cause.__cause__
        if not isinstance(cause, ImportError | AttributeError | TypeError):
            raise cause from None
        reason = f"{type(cause).__name__}: {cause}".splitlines()[0]
        raise ConfigError(
            f"{key}._target_={show(spec.get('_target_'))} could not be built ({reason}); "
            f"{key}._target_ must be an importable dotted path to a callable that accepts "
            "the other keys as arguments"
        ) from None


@dataclass
class Components:
    model: torch.nn.Module
    train_set: Any
    val_set: Any
    loss_fn: Callable


def build_model_and_data(config: dict, build: Callable[..., Any], device: torch.device) -> Components:
    """Model first, then data: the order of the seed's labs, so a seed gives the same weights."""
    model = build_component(build, "model", config["model"])
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model._target_={config['model']['_target_']} built a {type(model).__name__}, "
            "not a torch.nn.Module"
        )
    datasets = build_component(build, "data.dataset", config["data"]["dataset"])
    if not (isinstance(datasets, tuple | list) and len(datasets) == 2):
        raise ConfigError(
            f"data.dataset._target_={config['data']['dataset']['_target_']} must return "
            "(train_dataset, val_dataset)"
        )
    loss_fn = build_component(build, "loss", config["loss"])
    return Components(model.to(device), datasets[0], datasets[1], loss_fn)


@dataclass
class Prepared:
    device: torch.device
    precision: Precision
    parts: Components
    train_loader: Any
    val_loader: Any
    train_sampler: Any


def prepare(
    config: dict, build: Callable[..., Any], seed: int, process: ProcessInfo | None = None
) -> Prepared:
    """Device, seeds, precision, model, data and loaders: what train, doctor and lr_find share.
    With several processes each takes its own GPU (``LOCAL_RANK``) and its shard of the data."""
    process = process or ProcessInfo()
    device = resolve_device(config["device"])
    if process.distributed and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", process.local_rank)
        torch.cuda.set_device(device)
    seed_everything(seed, config["deterministic"])
    precision = resolve_precision(config["precision"], device)
    parts = build_model_and_data(config, build, device)
    data = config["data"]
    train_loader, val_loader, train_sampler = make_loaders(
        parts.train_set, parts.val_set, data["batch_size"], data["shuffle"], data["num_workers"], seed,
        pin_memory=device.type == "cuda", rank=process.rank, world_size=process.world_size,
    )  # fmt: skip
    return Prepared(device, precision, parts, train_loader, val_loader, train_sampler)


def loop_settings(config: dict) -> LoopSettings:
    trainer = config["trainer"]
    return LoopSettings(
        max_steps=trainer["max_steps"],
        max_epochs=trainer["max_epochs"],
        micro_batches_per_step=config["accumulate"],
        clip_norm=config["clip"],
        log_every_n_steps=trainer["log_every_n_steps"],
        val_every_n_epochs=trainer["val_every_n_epochs"],
        val_every_n_steps=trainer["val_every_n_steps"],
        monitor=config["checkpoint"]["monitor"],
        monitor_mode=config["checkpoint"]["mode"],
        on_nonfinite=config["on_nonfinite"],
        max_nonfinite_in_a_row=config["max_nonfinite_in_a_row"],
    )


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_resume_compatible(saved: dict, current: dict, path: Path) -> None:
    """Refuse a resumed config that would change the math of the run so far. Model changes are
    left to the strict state-dict check, which names the keys and shapes that differ."""
    saved_flat, current_flat = flatten(saved), flatten(current)
    changed = [
        f"{key} ({show(saved_flat.get(key, '<absent>'))} -> {show(current_flat.get(key, '<absent>'))})"
        for key in sorted(saved_flat.keys() | current_flat.keys())
        if saved_flat.get(key) != current_flat.get(key)
        and not key.startswith(RESUMABLE_CHANGES)
        and not key.startswith("model.")
    ]
    if changed:
        raise CheckpointError(
            f"resume={path}: these settings differ from the run being resumed and would change its "
            f"math: {', '.join(changed)}; resume with the original values, or start a new run"
        )


def record_split(run_dir: Path, train_set: Any, val_set: Any) -> None:
    """Keep the train/val split with the run, so the run can be repeated on the same data."""
    split = {"train_size": len(train_set), "val_size": len(val_set)}
    for name, dataset in (("train", train_set), ("val", val_set)):
        if hasattr(dataset, "indices"):
            split[f"{name}_indices"] = [int(index) for index in dataset.indices]
    (run_dir / "data_split.json").write_text(json.dumps(split))


HPARAM_KEYS = (
    "optimizer._target_", "optimizer.lr", "optimizer.weight_decay", "data.batch_size", "accumulate", "clip",
    "precision", "seed", "model._target_",
)  # fmt: skip


def hparams_of(config: dict, keys: Sequence[str]) -> dict[str, Any]:
    """The settings TensorBoard's HParams dashboard compares runs by."""
    flat = flatten(config)
    chosen = {}
    for key in [*HPARAM_KEYS, *keys]:
        value = flat.get(key)
        chosen[key] = value if isinstance(value, int | float | str | bool) else show(value)
    return chosen


def train(
    config: dict, run_dir: Path, build: Callable[..., Any], hparam_keys: Sequence[str] = ()
) -> float | None:
    """Run one experiment; return the best value of the monitored metric (what sweepers optimise).

    ``hparam_keys``: settings recorded for TensorBoard's HParams dashboard besides the usual ones
    (a sweep passes the keys it varies)."""
    process = from_environment()
    # A submitit job that finds a checkpoint in its own directory was requeued: it continues from there.
    resume_path = own_checkpoint(run_dir) if config["resume"] == "auto" or in_submitit_job() else None
    if resume_path is None and config["resume"] not in (None, "auto"):
        resume_path = Path(config["resume"])
    checkpoint = load_checkpoint(resume_path) if resume_path else None
    if checkpoint is not None:
        check_resume_compatible(checkpoint["config"], config, resume_path)
        if checkpoint.get("world_size", 1) != process.world_size:
            raise CheckpointError(
                f"resume={resume_path}: saved by {checkpoint.get('world_size', 1)} process(es), resumed with "
                f"{process.world_size}; the data order depends on the world size: resume with the same number"
            )
    if checkpoint is not None:
        seed = checkpoint["seed"]
    else:
        seed = draw_seed() if config["seed"] is None else config["seed"]
    prepared = prepare(config, build, seed, process)
    device, precision, parts = prepared.device, prepared.precision, prepared.parts
    train_loader, val_loader, train_sampler = (
        prepared.train_loader,
        prepared.val_loader,
        prepared.train_sampler,
    )
    model = parts.model
    compile_model = config["compile"]
    speed = apply_speed_settings(
        model, device, config["tf32"], config["channels_last"], compile_model and not process.distributed
    )
    forward_model, skip_grad_sync = speed.forward_model, nullcontext
    if process.distributed:
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        forward_model = torch.compile(ddp) if compile_model else ddp
        skip_grad_sync = ddp.no_sync
    optimizer = build_component(build, "optimizer", config["optimizer"], model.parameters())
    data = config["data"]
    settings = replace(loop_settings(config), channels_last=speed.channels_last)
    total_steps = planned_steps(settings, len(train_loader))
    scheduler = build_scheduler(optimizer, total_steps=total_steps, **config["scheduler"])
    state = TrainState()
    if checkpoint is not None:
        state = restore_training(checkpoint, resume_path, model, optimizer, scheduler, precision.scaler)

    # Everything is built and loaded: from here on the run writes into its directory.
    resumed_from = f"{resume_path} (step {state.step}, epoch {state.epoch})" if checkpoint else None
    plan = run_plan(
        config, device, precision, seed, total_steps,
        math.ceil(len(train_loader) / settings.micro_batches_per_step), run_dir, resumed_from, speed.notes,
        process.world_size,
    )  # fmt: skip
    log.info(plan)
    runtime = {
        "device": str(device),
        "precision_requested": precision.requested,
        "precision_used": precision.used,
        "seed": seed,
        "world_size": process.world_size,
        "effective_batch_size": data["batch_size"] * config["accumulate"] * process.world_size,
        "planned_steps": total_steps,
        "runner_version": runner.__version__,
        "torch_version": str(torch.__version__),
    }
    if process.is_main:  # only rank 0 writes: records, checkpoints, TensorBoard
        (run_dir / "run.yaml").write_text(yaml.safe_dump({**config, "runtime": runtime}, sort_keys=False))
        record_split(run_dir, parts.train_set, parts.val_set)
    label_mapping = getattr(parts.train_set, "classes", None)
    # Events past the checkpoint's step belong to the lost future of the interrupted run.
    logger = (
        TensorBoardLogger(run_dir, purge_step=state.step + 1 if checkpoint else None)
        if process.is_main
        else NullLogger()
    )
    checkpointer: Checkpointer = NoCheckpoints()
    if config["checkpoint"]["enabled"] and process.is_main:
        checkpointer = PeriodicCheckpointer(
            run_dir / CHECKPOINT_DIR,
            lambda state: checkpoint_payload(
                state, model, optimizer, scheduler, precision.scaler, config, seed, label_mapping,
                process.world_size,
            ),
            config["checkpoint"]["every_n_steps"],
            config["checkpoint"]["every_n_epochs"],
            config["checkpoint"]["keep_last"],
            config["checkpoint"]["save_best"],
            before_save=logger.flush,
        )  # fmt: skip
    logger.log_text("run/plan", plan)
    if checkpoint is not None:
        restore_rng_states(checkpoint["rng_states"])
    try:
        with GracefulStop() as stop:  # also covers the last save: a second Ctrl-C aborts it
            state = fit(
                forward_model, optimizer, scheduler, parts.loss_fn, train_loader, train_sampler,
                val_loader, device, precision, settings, logger, state, checkpointer, stop, skip_grad_sync,
            )  # fmt: skip
            last = checkpointer.save_last(state)
        monitor = config["checkpoint"]["monitor"]
        logger.log_hparams(
            state.step,
            hparams_of(config, hparam_keys),
            {
                f"hparams/best_{monitor.replace('/', '_')}": state.best_val,
                "hparams/final_train_loss": state.last_train_loss,
                **{
                    f"hparams/final_{name.replace('/', '_')}": value for name, value in state.last_val.items()
                },
            },
        )
    finally:
        logger.close()
    report_end(state, checkpointer, last, run_dir, process.is_main)
    if state.stopped_by_signal is not None:
        stop.exit_for(state.stopped_by_signal)
    return state.best_val


def report_end(
    state: TrainState, checkpointer: Checkpointer, last: Path | None, run_dir: Path, is_main: bool
) -> None:
    if checkpointer.save_seconds:
        pauses = checkpointer.save_seconds
        writes = getattr(checkpointer, "write_seconds", None) or [0.0]
        log.info(
            "checkpoints: %d saves; training paused %.1f ms per save (median, max %.1f ms), "
            "writing took %.1f ms (median) in the background",
            len(pauses), 1000 * statistics.median(pauses), 1000 * max(pauses),
            1000 * statistics.median(writes),
        )  # fmt: skip
    if state.stopped_by_signal is not None:
        name = signal.Signals(state.stopped_by_signal).name
        if not is_main:
            log.warning("stopped by %s at step %d; rank 0 saves the checkpoint", name, state.step)
            return
        saved = f"saved {last}" if last else "nothing saved (checkpoint.enabled=false)"
        log.warning("stopped by %s at step %d; %s", name, state.step, saved)
        if last:
            log.warning("resume with: python -m runner train resume=%s", run_dir)
        return
    metrics = " ".join(f"{name}={value:.4g}" for name, value in state.last_val.items())
    best = f"{state.best_val:.4g} at step {state.best_val_step}" if state.best_val is not None else "n/a"
    log.info("done: step=%d epoch=%d %s | best %s", state.step, state.epoch, metrics, best)
