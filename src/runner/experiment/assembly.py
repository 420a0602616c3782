"""The assembly, a run's second phase: its parts built from the config and loaded from the resume point
into one :class:`Assembly`, which the fit, the run plan and the checkpointer read.

Nothing here writes. Whatever can refuse the run (a part that cannot be saved, a schedule built for
another plan, the first batch tried on the model) does so before the run's directory is touched.
"""

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runner.checkpoint.contents import Stateful, check_loadable, checkpoint_payload, restore_rng_states
from runner.checkpoint.files import CHECKPOINT_DIR
from runner.checkpoint.policy import Checkpointer, NoCheckpoints, PeriodicCheckpointer
from runner.checkpoint.state import TrainState
from runner.checkpoint.trainable import check_base_rebuilds
from runner.config.schema import RunConfig
from runner.config.typed import as_dict
from runner.data.loading import SamplerOrder, StreamPosition, batches_per_epoch, stream_position
from runner.data.stream_state import LoaderPosition
from runner.experiment.optimizers import chosen_step
from runner.experiment.parallel import Spread, oom_policy, spread_model
from runner.experiment.profiling import check_profile
from runner.experiment.resume import ResumePoint, check_planned_values
from runner.experiment.setup import (
    Build,
    Prepared,
    build_model_as_run,
    build_named,
    build_optimizer,
    build_schedule,
    prepare,
)
from runner.observe.writer import MetricLogger
from runner.training.callbacks import Callbacks
from runner.training.carried import NoCarriedState, carried_state_of
from runner.training.distributed import ProcessInfo
from runner.training.epochs import Loaders, start_with_checked_batch
from runner.training.metrics import check_metrics_fit_loss, unshifted_accuracy_warning
from runner.training.monitor_check import check_fit_and_monitors
from runner.training.plan import LoopSettings, planned_steps, steps_per_epoch
from runner.training.schedules import Schedule
from runner.training.speed import SpeedPlan, apply_speed_settings, compile_options
from runner.training.step import Learner

log = logging.getLogger("runner")


@dataclass
class Assembly:
    """A run's parts, built and loaded, before it writes: what the fit runs (the learner, schedule,
    loaders, settings and callbacks, from ``state``), what the run plan shows, and what the
    checkpointer saves (``stateful``, with the run's record)."""

    config: RunConfig
    plain_config: dict[str, Any]  # the config as plain values: run.yaml, HParams, every checkpoint
    run_dir: Path
    process: ProcessInfo
    start: ResumePoint  # the checkpoint continued (if any) and the seed
    prepared: Prepared  # device, precision, model, data sets, loaders
    speed: SpeedPlan
    spread: Spread
    optimizer: torch.optim.Optimizer
    learner: Learner
    settings: LoopSettings
    callbacks: Callbacks
    planned: dict[str, int | None]  # total_steps, steps_per_epoch (None: a stream): what a schedule reads
    schedule: Schedule
    stateful: Stateful
    state: TrainState  # where the run stands: step 0, or the checkpoint's
    loaders: Loaders  # their first batch already tried (``check_first``)

    @property
    def device(self) -> torch.device:
        return self.prepared.device

    @property
    def total_steps(self) -> int:
        return self.planned["total_steps"]

    def check_first(self, batch: Any) -> None:
        """The first batch tried on the model, the loss and the monitored metrics, before the run writes."""
        settings, monitors = self.settings, self.callbacks.monitors()
        check_fit_and_monitors(self.learner, batch, settings, self.schedule.monitor, monitors)
        loss_fn, target_key = self.prepared.parts.loss_fn, self.config.data.target_key
        if warning := unshifted_accuracy_warning(settings.metrics, loss_fn, batch, target_key):
            log.warning(warning)


def assemble(
    config: RunConfig, run_dir: Path, build: Build, start: ResumePoint, process: ProcessInfo,
    added_callbacks: dict[str, Any] | None = None,
) -> Assembly:  # fmt: skip
    """The parts in a hand-written loop's order (model and data first: a seed gives the same weights),
    the checkpoint's state loaded into them, and the loaders' first batch tried on them.
    ``added_callbacks``: callbacks by name beside the config's (a search's, for its jobs)."""
    prepared = prepare(config, build, start.seed, process)
    if config.checkpoint.trainable_only and start.found is None:  # can its checkpoints be loaded again?
        seed = start.seed
        check_base_rebuilds(prepared.parts.model, lambda: build_model_as_run(build, config, seed), seed)
    speed, spread, optimizer, learner = build_learner(config, build, prepared, process)
    settings = loop_settings(config, build_named(build, "metrics", config.metrics), process)
    check_metrics_fit_loss(settings.metrics, prepared.parts.loss_fn)
    callbacks = Callbacks({**build_named(build, "callbacks", config.callbacks), **(added_callbacks or {})})
    check_loadable(callbacks.state_dict(), "callbacks_state_dict")  # before anything is written
    planned = planned_counts(settings, prepared)
    if start.found is not None:
        check_planned_values(config.scheduler, start.found.checkpoint["planned"], planned, start.found.path)
    total_steps, per_epoch = planned["total_steps"], planned["steps_per_epoch"]
    schedule = build_schedule(build, config.scheduler, optimizer, total_steps, per_epoch)
    # A stream that keeps its own position is saved with the checkpoints (read by workers, through
    # torchdata's loader); other streams are resumed by skipping the batches done.
    position = stream_position(prepared.train_loader, prepared.parts.train_set)
    stateful = checkpointable(config, prepared, optimizer, schedule, callbacks, position, process)
    state = resumed_state(stateful, start)
    check_profile(config.profile, run_dir, total_steps, state.step)  # before anything is written
    stream_restored = position is not None and f"{position.name}_state_dict" in (start.checkpoint or {})
    train_loader, sampler, val_loader = prepared.train_loader, prepared.train_sampler, prepared.val_loader
    loaders = Loaders(train_loader, sampler, val_loader, stream_restored, position, start.seed)
    assembly = Assembly(
        config=config, plain_config=as_dict(config), run_dir=run_dir, process=process, start=start,
        prepared=prepared, speed=speed, spread=spread, optimizer=optimizer, learner=learner,
        settings=settings, callbacks=callbacks, planned=planned, schedule=schedule, stateful=stateful,
        state=state, loaders=loaders,
    )  # fmt: skip
    loaders.started = start_with_checked_batch(
        loaders, state, prepared.parts.loss_fn, config.data.target_key, check=assembly.check_first
    )
    return assembly


def build_learner(
    config: RunConfig, build: Build, prepared: Prepared, process: ProcessInfo
) -> tuple[SpeedPlan, Spread, torch.optim.Optimizer, Learner]:
    """The model sped up (tf32, channels-last, compile) and spread over the processes, its optimizer
    built on what this process holds of it, and the learner that steps them."""
    device, precision, parts = prepared.device, prepared.precision, prepared.parts
    model = parts.model
    compile_alone = compile_options(config) if not process.distributed and config.strategy == "ddp" else None
    speed = apply_speed_settings(model, device, config.tf32, config.channels_last, compile_alone)
    spread = spread_model(config, model, speed.forward_model, device, precision.used, process)
    optimizer = build_optimizer(build, config, model)  # after sharding: on the shards
    learner = Learner(
        spread.forward_model, parts.loss_fn, optimizer, precision, device, speed.channels_last,
        config.data.target_key, skip_grad_sync=spread.skip_grad_sync, plain_model=model,
        processes=process.world_size, step=chosen_step(optimizer, spread),
    )  # fmt: skip
    return speed, spread, optimizer, learner


def loop_settings(config: RunConfig, metrics: dict[str, Any], process: ProcessInfo) -> LoopSettings:
    """``metrics``: built from ``config.metrics``; ``on_oom`` as it holds for ``process`` (``oom_policy``)."""
    trainer = config.trainer
    return LoopSettings(
        max_steps=trainer.max_steps,
        max_epochs=trainer.max_epochs,
        micro_batches_per_step=config.accumulate,
        clip_norm=config.clip,
        log_every_n_steps=trainer.log_every_n_steps,
        val_every_n_epochs=trainer.val_every_n_epochs,
        val_every_n_steps=trainer.val_every_n_steps,
        monitor=config.checkpoint.monitor,
        monitor_mode=config.checkpoint.mode,
        on_nonfinite=config.on_nonfinite,
        max_nonfinite_in_a_row=config.max_nonfinite_in_a_row,
        on_oom=oom_policy(config, process),
        metrics=metrics,
    )


def planned_counts(settings: LoopSettings, prepared: Prepared) -> dict[str, int | None]:
    """The optimizer steps the run plans in all and per epoch (``None``: the data is a stream): what a
    scheduler's ``${total_steps}`` and ``${steps_per_epoch}`` are, kept in every checkpoint."""
    micro_batches_per_epoch = batches_per_epoch(prepared.train_loader, prepared.train_sampler)
    total_steps = planned_steps(settings, micro_batches_per_epoch)
    per_epoch = None if micro_batches_per_epoch is None else steps_per_epoch(
        micro_batches_per_epoch, settings.micro_batches_per_step
    )  # fmt: skip
    return {"total_steps": total_steps, "steps_per_epoch": per_epoch}


def checkpointable(
    config: RunConfig, prepared: Prepared, optimizer: torch.optim.Optimizer, schedule: Schedule,
    callbacks: Callbacks, position: StreamPosition | LoaderPosition | None, process: ProcessInfo,
) -> Stateful:  # fmt: skip
    """What a checkpoint saves and a resume loads: the model, optimizer, schedule and loss scaler, and
    beside them the callbacks, a stream's own position, a model's carried state and the sampler's order
    (each checked to be loadable again before anything is written)."""
    model = prepared.parts.model
    carried = carried_state_of(model, process.world_size)
    others = {
        "callbacks": callbacks,
        **({position.name: position} if position else {}),
        **({"carried": carried} if not isinstance(carried, NoCarriedState) else {}),
    }
    if isinstance(prepared.train_sampler, SamplerOrder):  # data.sampler: its state resumes its order
        others["sampler"] = prepared.train_sampler
        check_loadable(prepared.train_sampler.state_dict(), "sampler_state_dict")  # before any write
    averaged = functools.partial(callbacks.averaged_state_dict, model)
    return Stateful(model, optimizer, schedule, prepared.precision.scaler, others, averaged,
                    trainable_only=config.checkpoint.trainable_only)  # fmt: skip


def resumed_state(stateful: Stateful, start: ResumePoint) -> TrainState:
    """Where the run stands: step 0, or the checkpoint's state loaded into every part and its random
    states restored (nothing has drawn from them yet)."""
    state = TrainState()
    if start.found is not None:
        stateful.load_state_dicts(start.found.checkpoint, start.found.path)
        state.load_state_dict(start.found.checkpoint)
        restore_rng_states(start.found.checkpoint["rng_states"], start.found.path)
    return state


def make_checkpointer(assembly: Assembly, logger: MetricLogger) -> Checkpointer:
    """Sharded checkpoints are written by every process, plain ones by rank 0; none with
    ``checkpoint.enabled=false``. Made once the run writes: it clears what a killed save left. Each
    save flushes ``logger`` first: a checkpoint never outlives its step's logs."""
    config, process, policy = assembly.config, assembly.process, assembly.config.checkpoint
    if not (policy.enabled and (process.is_main or config.strategy == "fsdp")):
        return NoCheckpoints()
    run_record = {
        "monitor": policy.monitor, "seed": assembly.start.seed, "world_size": process.world_size,
        "config": assembly.plain_config,
        "label_mapping": getattr(assembly.prepared.parts.train_set, "classes", None),
        "planned": assembly.planned,
    }  # fmt: skip

    def payload(state: TrainState) -> dict[str, Any]:
        # stop_reason: a run a callback ended is not continued by a resume with the same callbacks.
        return checkpoint_payload(
            assembly.stateful, {**state.state_dict(), "stop_reason": state.stop_reason}, run_record
        )

    folder = assembly.run_dir / CHECKPOINT_DIR
    if config.strategy == "fsdp":
        from runner.checkpoint.sharded_saves import ShardedCheckpointer

        return ShardedCheckpointer(
            folder, payload, policy.every_n_steps, policy.every_n_epochs, policy.keep_last,
            policy.save_best, process.rank, policy.async_save, before_save=logger.flush,
        )  # fmt: skip
    return PeriodicCheckpointer(
        folder, payload, policy.every_n_steps, policy.every_n_epochs, policy.keep_last, policy.save_best,
        before_save=logger.flush,
    )  # fmt: skip
