"""The training engine: a hand-written training loop, with accumulation, mixed precision and
clipping (in :func:`train_step`), readable top to bottom in :func:`fit`.

The loop calls its policies at fixed points (checkpointing, logging, the stop flag) and each decides
for itself whether to act.
"""

import logging
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch.utils.data import DataLoader

from runner.checkpoint.durable import WriteError
from runner.checkpoint.policy import Checkpointer, NoCheckpoints
from runner.checkpoint.state import TrainState
from runner.config.monitors import check_monitored
from runner.data.loading import batches_per_epoch
from runner.observe.progress import Progress
from runner.observe.records import best_tag
from runner.observe.writer import MetricLogger, NullLogger
from runner.training.cadence import ValidationCadence
from runner.training.callbacks import Callbacks, Context, detached
from runner.training.carried import carried_state_of
from runner.training.device import to_floats
from runner.training.epochs import Loaders, epoch_windows, no_batch_in
from runner.training.modes import set_apart, start_training
from runner.training.nonfinite import DeferredGuard, guard_for
from runner.training.oom import OutOfMemoryStop, evaluate_within_memory, step_within_memory
from runner.training.plan import LoopSettings, planned_steps
from runner.training.schedules import Schedule
from runner.training.step import Learner, StepResult, mean_over_processes
from runner.training.step_log import StepLog
from runner.training.time_shares import StepTimes
from runner.training.update import clipped_norm
from runner.training.validation import improves

log = logging.getLogger("runner")


class StopFlag(Protocol):
    """Set asynchronously (by a signal handler); read at optimizer-step boundaries. It may raise instead
    (a write that failed in the background): the run ends at that boundary, its state consistent."""

    def requested(self) -> int | None: ...


@dataclass
class Hooks:
    """What the loop calls at fixed points; each off by default as a no-op object."""

    logger: MetricLogger = field(default_factory=NullLogger)
    checkpointer: Checkpointer = field(default_factory=NoCheckpoints)
    stop: StopFlag | None = None
    callbacks: Callbacks = field(default_factory=Callbacks)
    times: StepTimes = field(default_factory=StepTimes)  # the time shares, and the profiler's phases


ALL_FINITE = "the non-finite guard's norms"  # read with the log step's values, never logged


def step_scalars(
    result: StepResult, state: TrainState, learner: Learner, settings: LoopSettings, guard: DeferredGuard
) -> dict[str, float]:
    """What a log step records, read from the device in one go, with the non-finite guard's verdict on
    the norms it kept since its last read (it raises for a non-finite one)."""
    scalars = {
        "train/loss": mean_over_processes(result, learner.processes),
        "train/grad_norm": result.grad_norm_before_clip,
        "train/lr": result.lr,
    }
    for index, lr in enumerate(result.group_lrs):
        name = learner.optimizer.param_groups[index].get("name", str(index))
        scalars[f"train/lr/{name}"] = lr
    if learner.precision.scaler.is_enabled():
        scalars["train/loss_scale"] = learner.precision.scaler.get_scale()
    scalars.update(result.scalars)  # a step the model writes: its losses, each optimizer's norms
    if (finite := guard.all_finite()) is not None:
        scalars[ALL_FINITE] = finite
    scalars = to_floats(scalars)
    if ALL_FINITE in scalars:
        guard.check(state, finite=bool(scalars.pop(ALL_FINITE)))
    if state.skipped_steps or settings.on_nonfinite == "skip":  # as of this step: the guard has counted
        scalars["train/skipped_steps"] = state.skipped_steps
    scalars.setdefault(
        "train/grad_norm_clipped", clipped_norm(scalars["train/grad_norm"], settings.clip_norm)
    )
    return scalars


def validate(
    learner: Learner,
    loader: DataLoader,
    settings: LoopSettings,
    state: TrainState,
    hooks: Hooks,
    progress: Progress,
    schedule: Schedule,
    context: Context,
    on_cadence: bool = True,
) -> bool:
    """Validate, log, and update the best value; return whether it improved. Only a validation on the
    run's cadence steps a scheduler on it: the one that ends a run between two validations must not
    change what a longer run of the same settings would do. Every validation calls the callbacks'
    ``on_validation_end``, that one too, marked ``context.extra_validation``."""
    with hooks.callbacks.evaluation_weights(learner.plain_model):
        state.last_val = evaluate_within_memory(  # its batches as they fit in memory (oom.py)
            learner, loader, state, settings.on_oom, lambda batches: learner.step.evaluate(
                learner.model, batches, learner.loss_fn, learner.device, learner.precision,
                learner.channels_last, settings.metrics, learner.target_key,
            ),
        )  # fmt: skip
    monitors = {"checkpoint.monitor": settings.monitor, "scheduler.monitor": schedule.monitor}
    check_monitored(monitors | hooks.callbacks.monitors(), state.last_val)
    value = state.last_val[settings.monitor]
    improved = improves(value, state.best_val, settings.monitor_mode)
    if improved:
        state.best_val, state.best_val_step = value, state.step
    # The best so far as a series of its own: the number a sweep compares runs by (TensorBoard's
    # HParams tab reads its last value), beside the curve it summarises. None until a finite one.
    best = {best_tag(settings.monitor): state.best_val} if state.best_val is not None else {}
    hooks.logger.log_scalars(state.step, {**state.last_val, **best})
    # The train loss of this step, or none: one logged steps before would read as this step's.
    train_loss = state.last_train_loss if state.last_train_loss_step == state.step else None
    progress.report(state.epoch, state.step, {"train/loss": train_loss, **state.last_val})
    context.metrics.update(state.last_val)
    if on_cadence:
        schedule.after_validation(state.last_val)
    context.extra_validation = not on_cadence
    hooks.callbacks.call("on_validation_end", context)
    context.extra_validation = False
    return improved


def defers_the_guard(learner: Learner, settings: LoopSettings) -> bool:
    """``on_nonfinite=raise`` decides nothing about the step itself: its update is applied, its norm read
    with the next read. Under loss scaling and in a step the model writes (a non-finite part's update
    must not apply while the others' do) the step skips a non-finite update on the device (update.py)."""
    scaled = learner.precision.scaler.is_enabled()
    return settings.on_nonfinite == "raise" and not scaled and not learner.step.writes_own


def guard_of(learner: Learner, settings: LoopSettings) -> DeferredGuard:
    """The non-finite guard. It reads the norms where the loop reads anyway (nonfinite.py), not every
    step; a step that must not apply a non-finite update checks its norms itself and skips it on the
    device (update.py): ``skips_on_device``."""
    check_each_step = settings.on_nonfinite != "off" and not defers_the_guard(learner, settings)
    return guard_for(settings, learner.precision.scaler.is_enabled(), skips_on_device=check_each_step)


@dataclass
class Validator:
    """A validation as the loop runs it, where its cadence says: once a step at most, the non-finite
    guard's verdict read first (a validation reports no state the guard has not seen), its time counted
    as validation's. What :func:`validate` reads besides the state."""

    learner: Learner
    loader: DataLoader
    settings: LoopSettings
    hooks: Hooks
    progress: Progress
    schedule: Schedule
    context: Context
    guard: DeferredGuard
    cadence: ValidationCadence = field(init=False)

    def __post_init__(self) -> None:
        self.cadence = ValidationCadence.of(self.settings)

    def at_epoch_end(self, state: TrainState) -> bool | None:
        """After the position moved to the next epoch, where the steps' or the epochs' cadence says:
        whether the validation improved; ``None`` without one."""
        return self.once(state) if self.cadence.at_epoch_end(state.epoch, state.step) else None

    def at_end(self, state: TrainState) -> bool | None:
        """The run's last: off the cadence (``validate``'s ``on_cadence``), unless its last step
        validated already; none after a stop signal (the run saves and exits at once)."""
        return self.once(state, on_cadence=False) if state.stopped_by_signal is None else None

    def once(self, state: TrainState, on_cadence: bool = True) -> bool | None:
        """Whether it improved; ``None`` when this step was validated already."""
        if not self.cadence.takes(state.step):
            return None
        self.guard.check(state)
        self.hooks.times.now_in("validation")
        improved = validate(
            self.learner, self.loader, self.settings, state, self.hooks, self.progress, self.schedule,
            self.context, on_cadence,
        )  # fmt: skip
        self.cadence.validated(state.last_val)
        return improved


def end_step_callbacks(callbacks: Callbacks, context: Context, result: StepResult) -> None:
    """``on_step_end`` sees the step's last micro-batch and its outputs (detached), which are not held
    into the next step: they may be large (an LM's logits)."""
    context.batch, context.outputs = result.last_batch, detached(result.last_outputs)
    callbacks.call("on_step_end", context)
    context.batch = context.outputs = result.last_batch = result.last_outputs = None


def end_epoch(
    state: TrainState, context: Context, schedule: Schedule, callbacks: Callbacks, validator: Validator
) -> bool | None:
    """The position moves to the next epoch first: a checkpoint of this moment resumes at the next
    epoch's start. Then the validation the cadence asks for, the scheduler's epoch step and the
    callbacks' ``on_epoch_end``. Whether the validation improved; ``None`` without one."""
    state.epoch, state.batches_done_in_epoch = state.epoch + 1, 0
    context.epoch = state.epoch
    improved = validator.at_epoch_end(state)
    schedule.after_epoch(state.epoch, state.last_val)
    callbacks.call("on_epoch_end", context)
    return improved


def checkpoint_step(
    checkpointer: Checkpointer,
    guard: DeferredGuard,
    state: TrainState,
    improved: bool | None,
    epoch_ended: bool,
) -> None:
    """The checkpointer's calls at the end of a step, after everything the step changes (schedulers,
    callbacks): every file of one moment holds the same state, which the guard has seen."""
    if checkpointer.saves_at(state, epoch_ended):
        guard.check(state)  # before a save (a validation checked already)
    if improved is not None:
        checkpointer.after_validation(state, improved)
    if epoch_ended:
        checkpointer.after_epoch(state)
    checkpointer.after_step(state)


def end_run(
    state: TrainState, context: Context, hooks: Hooks, guard: DeferredGuard, validator: Validator
) -> None:
    """The guard's verdict on the last steps first (before the final validation, the last save and the
    run's result), then why the run stopped, its last validation and the callbacks' ``on_train_end``."""
    guard.check(state)
    state.stop_reason = context.stop_reason
    if (improved := validator.at_end(state)) is not None:
        hooks.checkpointer.after_validation(state, improved)
    hooks.callbacks.call("on_train_end", context)


def fit(
    learner: Learner,
    scheduler: Schedule | torch.optim.lr_scheduler.LRScheduler,
    loaders: Loaders,
    settings: LoopSettings,
    hooks: Hooks | None = None,
    state: TrainState | None = None,
) -> TrainState:
    """Train until ``max_steps`` or ``max_epochs``, whichever comes first, or until a callback asks
    to stop; return the final state. A bare scheduler steps after every optimizer step."""
    hooks = hooks or Hooks()
    state = state or TrainState()
    schedule = scheduler if isinstance(scheduler, Schedule) else Schedule(scheduler)
    micro_batches_per_epoch = batches_per_epoch(loaders.train, loaders.sampler)  # None: a stream
    total_steps = planned_steps(settings, micro_batches_per_epoch)
    progress = Progress(total_steps, initial_step=state.step)
    step_log = StepLog(hooks.logger, progress, hooks.times, learner.device)
    context = Context(learner.plain_model, learner.optimizer, step_log.scalar, state.step, state.epoch)
    step_callbacks = hooks.callbacks.has("on_step_end")
    guard = guard_of(learner, settings)
    check_each_step = guard.skips_on_device  # the step checks its norms: it skips a non-finite update
    carried = carried_state_of(learner.plain_model)  # a model's state from batch to batch (carried.py)
    validator = Validator(learner, loaders.val, settings, hooks, progress, schedule, context, guard)
    try:  # the bar is closed however the loop ends: an error's line is not glued to it
        # The model's own train(); a part its builder left in eval() (a frozen teacher) stays so (modes.py).
        start_training(learner.model, set_apart(learner.plain_model))
        learner.optimizer.zero_grad(set_to_none=True)
        hooks.callbacks.call("on_train_start", context)
        first_epoch = True  # it may continue part-way through, and may have been started by the caller
        while state.step < total_steps and (settings.max_epochs is None or state.epoch < settings.max_epochs):
            windows = epoch_windows(loaders, state, first_epoch, settings.micro_batches_per_step)
            if state.batches_done_in_epoch == 0:  # a resumed epoch goes on with the state it had
                carried.reset()
            first_epoch, epoch_had_batches = False, False
            for window, stream_ended in hooks.times.waiting(windows, state):  # the wait for data, timed
                epoch_had_batches = True
                result = step_within_memory(  # the window as it fits in memory (oom.py)
                    learner, window, state, settings.on_oom, step_log.scalar,
                    lambda parts: learner.step.train(
                        learner, parts, settings.clip_norm, check_finite=check_each_step,
                        keep_last=step_callbacks,
                    ),
                )  # fmt: skip
                guard.keep(result.grad_norm_before_clip, state, result.returned_losses)  # counted at its read
                schedule.after_step(state.step + 1)
                state.step += 1
                state.batches_done_in_epoch += len(window)
                step_log.samples += result.samples
                context.step = state.step
                if state.step % settings.log_every_n_steps == 0 or state.step == total_steps:
                    step_log.write(state, step_scalars(result, state, learner, settings, guard), context)
                if step_callbacks:
                    end_step_callbacks(hooks.callbacks, context, result)
                epoch_ended = stream_ended or state.batches_done_in_epoch == micro_batches_per_epoch
                if epoch_ended:
                    improved = end_epoch(state, context, schedule, hooks.callbacks, validator)
                else:
                    improved = validator.once(state) if validator.cadence.at_step(state.step) else None
                hooks.times.now_in("checkpoint")
                checkpoint_step(hooks.checkpointer, guard, state, improved, epoch_ended)
                if hooks.stop is not None and (signal_number := hooks.stop.requested()) is not None:
                    state.stopped_by_signal = signal_number
                    break
                if context.stop_reason is not None or state.step >= total_steps or epoch_ended:
                    break
            if not epoch_had_batches:
                raise no_batch_in(state.epoch)
            if state.stopped_by_signal is not None or context.stop_reason is not None:
                break
        end_run(state, context, hooks, guard, validator)
    except (OutOfMemoryStop, WriteError):
        guard.check(state)  # these stops save last.pt: never a state the guard has not seen
        raise
    finally:
        progress.close()
    hooks.logger.flush()
    return state
