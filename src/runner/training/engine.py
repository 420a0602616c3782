"""The training engine: a hand-written training loop, with accumulation, mixed precision and
clipping (in :func:`train_step`), readable top to bottom in :func:`fit`.

The loop calls its policies at fixed points (checkpointing, logging, the stop flag) and each decides
for itself whether to act.
"""

import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch.utils.data import DataLoader

from runner.checkpoint.durable import WriteError
from runner.checkpoint.policy import Checkpointer, NoCheckpoints
from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.config.monitors import check_monitored
from runner.data.loading import batches_per_epoch, epoch_batches, read_ahead
from runner.observe.progress import Progress
from runner.observe.records import MAX_MEMORY_ALLOCATED, SAMPLES_PER_SEC, best_tag
from runner.observe.writer import MetricLogger, NullLogger
from runner.training.callbacks import Callbacks, Context, detached
from runner.training.carried import carried_state_of
from runner.training.device import to_floats
from runner.training.epochs import Loaders, first_epoch_batches
from runner.training.metrics import unlogged_metrics_warning
from runner.training.modes import set_apart, start_training
from runner.training.nonfinite import DeferredGuard, guard_for
from runner.training.oom import OutOfMemoryStop, evaluate_within_memory, step_within_memory
from runner.training.plan import LoopSettings, planned_steps
from runner.training.schedules import Schedule
from runner.training.step import Learner, StepResult, accumulation_windows, mean_over_processes
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
    samples_since_log, last_log_time = 0, time.perf_counter()
    validated_at_step = None
    first_validation = True

    def log_scalar(tag: str, value: float, step: int) -> None:
        hooks.logger.log_scalars(step, {tag: value})

    context = Context(learner.plain_model, learner.optimizer, log_scalar, state.step, state.epoch)
    step_callbacks = hooks.callbacks.has("on_step_end")
    # The guard reads the norms where the loop reads anyway (nonfinite.py), not every step; a step that
    # must not apply a non-finite update skips it on the device (update.py).
    check_each_step = settings.on_nonfinite != "off" and not defers_the_guard(learner, settings)
    guard = guard_for(settings, learner.precision.scaler.is_enabled(), skips_on_device=check_each_step)
    carried = carried_state_of(learner.plain_model)  # a model's state from batch to batch (carried.py)

    def validate_once(on_cadence: bool = True) -> bool | None:
        """``None`` when this step was validated already."""
        nonlocal validated_at_step, first_validation
        if validated_at_step == state.step:
            return None
        validated_at_step = state.step
        guard.check(state)
        hooks.times.now_in("validation")
        improved = validate(
            learner, loaders.val, settings, state, hooks, progress, schedule, context, on_cadence
        )
        if first_validation and (warning := unlogged_metrics_warning(settings.metrics, state.last_val)):
            log.warning(warning)
        first_validation = False
        return improved

    def end_epoch(step_validates: bool) -> bool | None:
        """The position moves to the next epoch first: a checkpoint of this moment resumes at the next
        epoch's start."""
        state.epoch, state.batches_done_in_epoch = state.epoch + 1, 0
        context.epoch = state.epoch
        improved = None
        if step_validates or (settings.val_every_n_epochs and state.epoch % settings.val_every_n_epochs == 0):
            improved = validate_once()
        schedule.after_epoch(state.epoch, state.last_val)
        hooks.callbacks.call("on_epoch_end", context)
        return improved

    try:  # the bar is closed however the loop ends: an error's line is not glued to it
        # The model's own train(); a part its builder left in eval() (a frozen teacher) stays so (modes.py).
        start_training(learner.model, set_apart(learner.plain_model))
        learner.optimizer.zero_grad(set_to_none=True)
        hooks.callbacks.call("on_train_start", context)
        first_epoch = True  # it may continue part-way through, and may have been started by the caller
        while state.step < total_steps and (settings.max_epochs is None or state.epoch < settings.max_epochs):
            if first_epoch:
                batches = loaders.started
                if batches is None:
                    batches = first_epoch_batches(loaders, state)
            else:
                batches = epoch_batches(loaders.train, loaders.sampler, state.epoch, 0, loaders.seed)
            if state.batches_done_in_epoch == 0:  # a resumed epoch goes on with the state it had
                carried.reset()
            first_epoch, epoch_had_batches = False, False
            windows = accumulation_windows(batches, settings.micro_batches_per_step)
            # A stream's pass ends where it runs out: read one window ahead to know it at its last step.
            if micro_batches_per_epoch is None:
                windows = read_ahead(windows, loaders.stream_position)
            else:
                windows = ((window, False) for window in windows)
            windows = hooks.times.waiting(windows, state)  # the wait for data, timed
            for window, stream_ended in windows:
                epoch_had_batches = True
                result = step_within_memory(  # the window as it fits in memory (oom.py)
                    learner, window, state, settings.on_oom, log_scalar, lambda parts: learner.step.train(
                        learner, parts, settings.clip_norm, check_finite=check_each_step,
                        keep_last=step_callbacks,
                    ),
                )  # fmt: skip
                guard.keep(result.grad_norm_before_clip, state, result.returned_losses)  # counted at its read
                schedule.after_step(state.step + 1)
                state.step += 1
                state.batches_done_in_epoch += len(window)
                samples_since_log += result.samples
                context.step = state.step

                if state.step % settings.log_every_n_steps == 0 or state.step == total_steps:
                    scalars = step_scalars(result, state, learner, settings, guard)
                    now = time.perf_counter()  # after the read above: on a GPU it waits for the step
                    scalars[SAMPLES_PER_SEC] = samples_since_log / max(now - last_log_time, 1e-9)
                    samples_since_log, last_log_time = 0, now
                    scalars.update(hooks.times.shares())  # vitals/time/*; from here on, runner's own work
                    if learner.device.type == "cuda":  # this process's peak so far
                        scalars[MAX_MEMORY_ALLOCATED] = (
                            torch.cuda.max_memory_allocated(learner.device) / 2**30
                        )
                    state.last_train_loss, state.last_train_loss_step = scalars["train/loss"], state.step
                    hooks.logger.log_scalars(state.step, scalars)
                    progress.update(state.step, scalars)
                    context.metrics.update(scalars)
                    hooks.times.now_in("compute")
                if step_callbacks:
                    context.batch, context.outputs = result.last_batch, detached(result.last_outputs)
                    hooks.callbacks.call("on_step_end", context)
                    # Not held into the next step: the outputs may be large (an LM's logits).
                    context.batch = context.outputs = result.last_batch = result.last_outputs = None

                every = settings.val_every_n_steps
                step_validates = bool(every) and state.step % every == 0
                epoch_ended = stream_ended or state.batches_done_in_epoch == micro_batches_per_epoch
                improved = (
                    end_epoch(step_validates) if epoch_ended else validate_once() if step_validates else None
                )
                # Saves come after everything this step changes (schedulers, callbacks): every file of one
                # moment holds the same state.
                hooks.times.now_in("checkpoint")
                if hooks.checkpointer.saves_at(state, epoch_ended):
                    guard.check(state)  # before a save (a validation checked already)
                if improved is not None:
                    hooks.checkpointer.after_validation(state, improved)
                if epoch_ended:
                    hooks.checkpointer.after_epoch(state)
                hooks.checkpointer.after_step(state)
                if hooks.stop is not None and (signal_number := hooks.stop.requested()) is not None:
                    state.stopped_by_signal = signal_number
                    break
                if context.stop_reason is not None or state.step >= total_steps or epoch_ended:
                    break
            if not epoch_had_batches:
                raise UserError(
                    f"the training data yielded no batch in epoch {state.epoch}; a stream must yield at "
                    "least one batch per pass"
                )
            if state.stopped_by_signal is not None or context.stop_reason is not None:
                break

        guard.check(state)  # before the final validation, the last save and the run's result
        state.stop_reason = context.stop_reason
        if state.stopped_by_signal is None and (improved := validate_once(on_cadence=False)) is not None:
            hooks.checkpointer.after_validation(state, improved)
        hooks.callbacks.call("on_train_end", context)
    except (OutOfMemoryStop, WriteError):
        guard.check(state)  # these stops save last.pt: never a state the guard has not seen
        raise
    finally:
        progress.close()
    hooks.logger.flush()
    return state
