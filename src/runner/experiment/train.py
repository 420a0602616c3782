"""One training run: set up from a typed config, build, print the plan, fit, record.

Hydra-free (see ``setup.py``): the command line composes the config and hands it over.
"""

import functools
import logging
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any

import torch

import runner
from runner.checkpoint.contents import Stateful, check_loadable, checkpoint_payload, restore_rng_states
from runner.checkpoint.durable import WriteError
from runner.checkpoint.files import CHECKPOINT_DIR
from runner.checkpoint.locate import Found, locate_checkpoint, own_checkpoint
from runner.checkpoint.policy import Checkpointer, NoCheckpoints, PeriodicCheckpointer
from runner.checkpoint.state import TrainState
from runner.checkpoint.trainable import check_base_rebuilds
from runner.config.errors import UserError
from runner.config.schema import RunConfig
from runner.config.typed import as_dict
from runner.data.loading import SamplerOrder, batches_per_epoch, stream_position
from runner.experiment.finish import Run, report_end, resume_advice, watch_of
from runner.experiment.lock import refuse_if_held, run_dir_lock
from runner.experiment.optimizers import chosen_step
from runner.experiment.parallel import oom_policy, spread_model
from runner.experiment.profiling import check_profile
from runner.experiment.resume import check_planned_values, check_resume_compatible, check_world_size
from runner.experiment.runplan import Built, run_plan
from runner.experiment.setup import (
    Build,
    build_model_as_run,
    build_named,
    build_optimizer,
    build_schedule,
    prepare,
)
from runner.observe.all_runs_hparams import refresh_all_runs_experiment
from runner.observe.console import to_log_file
from runner.observe.hparams import HParamsRecord, hparams_of
from runner.observe.mlflow_store import check_tracking_uri
from runner.observe.records import record_split, write_run_record
from runner.observe.sweep_hparams import refresh_sweep_experiment
from runner.observe.trackers import Loggers, Trackers, open_trackers
from runner.observe.writer import MetricLogger, NullLogger, TensorBoardLogger
from runner.training.callbacks import Callbacks
from runner.training.carried import NoCarriedState, carried_state_of
from runner.training.distributed import ProcessInfo, from_environment, in_submitit_job, process_group_of_one
from runner.training.epochs import Loaders, start_with_checked_batch
from runner.training.metrics import check_metrics_fit_loss, unshifted_accuracy_warning
from runner.training.monitor_check import check_fit_and_monitors
from runner.training.plan import LoopSettings, planned_steps, steps_per_epoch
from runner.training.seeding import draw_seed
from runner.training.speed import apply_speed_settings, compile_options
from runner.training.step import Learner

log = logging.getLogger("runner")


class NothingToTrain(Exception):
    """The checkpoint resumed from has already reached the end this run asks for: nothing is trained and
    nothing written. Not an error: the command says so in one line (the message) and exits 0."""


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


def train(
    config: RunConfig,
    run_dir: Path,
    build: Build,
    resume_from: Found | None = None,
    added_callbacks: dict[str, Any] | None = None,
) -> TrainState:
    """Run one experiment; return where it ended: its ``best_val`` is what sweepers optimise.

    ``resume_from``: a checkpoint already found and loaded. ``added_callbacks``: callbacks by name
    beside the config's (a search's, for its jobs). ``strategy=fsdp`` in a single process runs in a
    process group of one: sharded code and checkpoints are the same as on several processes."""
    with process_group_of_one() if config.strategy == "fsdp" else nullcontext():
        return train_in_this_process(config, run_dir, build, resume_from, added_callbacks)


def train_in_this_process(
    config: RunConfig,
    run_dir: Path,
    build: Build,
    resume_from: Found | None = None,
    added_callbacks: dict[str, Any] | None = None,
) -> TrainState:
    process = from_environment()
    if process.is_main:
        refuse_if_held(run_dir)  # a run still writing there is named before anything is built
    if "mlflow" in config.logger and config.mlflow.tracking_uri is not None:  # one MLflow refuses: at once
        check_tracking_uri(config.mlflow.tracking_uri)
    plain_config = as_dict(config)
    found = checkpoint_to_resume(config, run_dir, resume_from)
    checkpoint = found.checkpoint if found else None
    if found is not None:
        check_resume_compatible(checkpoint["config"], plain_config, found.path)
        check_world_size(checkpoint["world_size"], process.world_size, found.path, config.resume_reshard)
        check_not_finished(config, plain_config, checkpoint, found.path)
    if checkpoint is not None:
        seed = checkpoint["seed"]
    else:
        seed = draw_seed() if config.seed is None else config.seed
    prepared = prepare(config, build, seed, process)
    if config.checkpoint.trainable_only and checkpoint is None:  # can its checkpoints be loaded again?
        check_base_rebuilds(prepared.parts.model, lambda: build_model_as_run(build, config, seed), seed)
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
    settings = loop_settings(config, build_named(build, "metrics", config.metrics), process)
    check_metrics_fit_loss(settings.metrics, parts.loss_fn)
    callbacks = Callbacks({**build_named(build, "callbacks", config.callbacks), **(added_callbacks or {})})
    check_loadable(callbacks.state_dict(), "callbacks_state_dict")  # before anything is written
    micro_batches_per_epoch = batches_per_epoch(prepared.train_loader, prepared.train_sampler)
    total_steps = planned_steps(settings, micro_batches_per_epoch)
    per_epoch = None if micro_batches_per_epoch is None else steps_per_epoch(
        micro_batches_per_epoch, settings.micro_batches_per_step
    )  # fmt: skip
    planned = {"total_steps": total_steps, "steps_per_epoch": per_epoch}
    if checkpoint is not None:
        check_planned_values(config.scheduler, checkpoint["planned"], planned, found.path)
    schedule = build_schedule(build, config.scheduler, optimizer, total_steps, per_epoch)
    # A stream that keeps its own position is saved with the checkpoints (read by workers, through
    # torchdata's loader); other streams are resumed by skipping the batches done.
    position = stream_position(prepared.train_loader, parts.train_set)
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
    stateful = Stateful(model, optimizer, schedule, precision.scaler, others, averaged,
                        trainable_only=config.checkpoint.trainable_only)  # fmt: skip
    state = TrainState()
    if checkpoint is not None:
        stateful.load_state_dicts(checkpoint, found.path)
        state.load_state_dict(checkpoint)
        restore_rng_states(checkpoint["rng_states"], found.path)  # nothing draws from them yet
    check_profile(config.profile, run_dir, total_steps, state.step)  # before anything is written
    stream_restored = position is not None and f"{position.name}_state_dict" in (checkpoint or {})
    loaders = Loaders(
        prepared.train_loader, prepared.train_sampler, prepared.val_loader, stream_restored, position, seed
    )

    def check_first(batch: Any) -> None:
        check_fit_and_monitors(learner, batch, settings, schedule.monitor, callbacks.monitors())
        if warning := unshifted_accuracy_warning(
            settings.metrics, parts.loss_fn, batch, config.data.target_key
        ):
            log.warning(warning)

    loaders.started = start_with_checked_batch(
        loaders, state, parts.loss_fn, config.data.target_key, check=check_first
    )

    # Everything is built and loaded, and the data fits: from here on the run writes into its directory.
    resumed_from = f"{found.path} (step {state.step}, epoch {state.epoch})" if found else None
    plan = run_plan(config, Built(
        device=device, precision=precision, seed=seed, model=model, optimizer=optimizer,
        loss_fn=parts.loss_fn, train_set=parts.train_set, val_set=parts.val_set, total_steps=total_steps,
        steps_per_epoch=per_epoch, run_dir=run_dir, speed_notes=speed.notes, world_size=process.world_size,
        resumed_from=resumed_from, start_step=state.step, reapplied=found.reapplied if found else (),
        spread_notes=spread.notes, schedule_counted=schedule.counted))  # fmt: skip
    logger: MetricLogger = NullLogger()
    trackers = Trackers()  # none, until rank 0 opens those logger=[...] names
    checkpointer: Checkpointer = NoCheckpoints()
    record: HParamsRecord | None = None  # rank 0's, once it starts writing
    try:
        with run_dir_lock(run_dir) if process.is_main else nullcontext():
            hparams = hparams_of(plain_config, seed)
            # First: a tracker that cannot start refuses the run unwritten (a resume's train.log too).
            if process.is_main:
                at = state.step if checkpoint else None
                trackers = Trackers(open_trackers(config.logger, run_dir, hparams, config, at))
            log.info(plan)
            if process.is_main:  # only rank 0 writes: records, checkpoints, TensorBoard, trackers
                runtime = {
                    "device": str(device),
                    "precision_requested": precision.requested,
                    "precision_used": precision.used,
                    "seed": seed,
                    "world_size": process.world_size,
                    "effective_batch_size": config.data.batch_size * config.accumulate * process.world_size,
                    "planned_steps": total_steps,
                    "runner_version": runner.__version__,
                    "torch_version": str(torch.__version__),
                }
                write_run_record(run_dir, plain_config, runtime)
                record_split(run_dir, parts.train_set, parts.val_set, parts.test_set)
                record = HParamsRecord(run_dir, hparams)
                record.start()  # a resume's replaces the interrupted run's
                # A sweep job: the sweep's HParams columns, with its settings; again at its end, after
                # jobs that started at the same time (parallel launchers) have written their records.
                refresh_hparams_columns(run_dir)
                # Events past the checkpoint's step belong to the lost future of the interrupted run.
                events = TensorBoardLogger(run_dir, purge_step=state.step + 1 if checkpoint else None)
                logger = Loggers(events, trackers)
            # Sharded checkpoints are written by every process; plain ones by rank 0.
            if config.checkpoint.enabled and (process.is_main or config.strategy == "fsdp"):
                checkpointer = make_checkpointer(config, run_dir, stateful, logger, process, {
                    "monitor": config.checkpoint.monitor, "seed": seed, "world_size": process.world_size,
                    "config": plain_config, "label_mapping": getattr(parts.train_set, "classes", None),
                    "planned": planned,
                })  # fmt: skip
            logger.log_text("run/plan", plan)

            def record_end(state: TrainState) -> None:
                trackers.finish("ok" if state.stopped_by_signal is None else "stopped", {
                    "monitor": config.checkpoint.monitor, "best": state.best_val,
                    "best_step": state.best_val_step, "step": state.step,
                })  # fmt: skip
                if record is not None and state.stopped_by_signal is None:
                    record.end(ok=True)
                    refresh_hparams_columns(run_dir)

            run = Run(learner, schedule, loaders, settings, callbacks, logger, checkpointer,
                      watch_of(config, run_dir, speed, device, process, state))  # fmt: skip
            state, last, stop = run.to_the_end(state, record_end)
            run.close()
            report_end(state, checkpointer, last, run_dir, process)
            if state.stopped_by_signal is not None:
                stop.exit_for(state.stopped_by_signal)
    except Exception as error:
        raised = error
        if isinstance(error, WriteError):
            last_good = checkpointer.last_written or (found.path if found else None)
            raised = error.with_advice(resume_advice(error, last_good, run_dir))
        with suppress(Exception):  # the event file's error is the one raised (below) already
            trackers.close()  # the trackers' runs end as failed, if not ended yet
            logger.close()
        if record is not None:  # the run had started writing: its records say how it ended
            record.end(ok=False)
            refresh_hparams_columns(run_dir)
            if isinstance(raised, UserError):  # the console gets it in one line; train.log keeps it too
                to_log_file(logging.ERROR, f"runner: error: {raised}")
        if raised is not error:
            raise raised from error
        raise
    return state


def refresh_hparams_columns(run_dir: Path) -> None:
    """The HParams columns of the sweep the run is a job of, and of every run under ``outputs/``."""
    refresh_sweep_experiment(run_dir)
    refresh_all_runs_experiment(run_dir)


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


def make_checkpointer(
    config: RunConfig, run_dir: Path, stateful: Stateful, logger: MetricLogger, process: ProcessInfo,
    run_record: dict[str, Any],
) -> Checkpointer:  # fmt: skip
    policy = config.checkpoint

    def payload(state: TrainState) -> dict[str, Any]:
        # stop_reason: a run a callback ended is not continued by a resume with the same callbacks.
        return checkpoint_payload(
            stateful, {**state.state_dict(), "stop_reason": state.stop_reason}, run_record
        )

    if config.strategy == "fsdp":
        from runner.checkpoint.sharded_saves import ShardedCheckpointer

        return ShardedCheckpointer(
            run_dir / CHECKPOINT_DIR, payload, policy.every_n_steps, policy.every_n_epochs, policy.keep_last,
            policy.save_best, process.rank, policy.async_save, before_save=logger.flush,
        )  # fmt: skip
    return PeriodicCheckpointer(
        run_dir / CHECKPOINT_DIR,
        payload,
        policy.every_n_steps, policy.every_n_epochs, policy.keep_last, policy.save_best,
        before_save=logger.flush,
    )  # fmt: skip
