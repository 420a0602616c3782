"""The training engine: the seed's template, with accumulation, mixed precision and clipping,
readable top to bottom in :func:`fit`."""

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from torch.utils.data import DataLoader

from runner.checks import ConfigError, UserError
from runner.data.loading import EpochSampler
from runner.distributed import sum_across_processes
from runner.metrics import Progress, TensorBoardLogger, to_floats
from runner.precision import Precision


@dataclass(frozen=True)
class LoopSettings:
    max_steps: int | None
    max_epochs: int | None
    micro_batches_per_step: int
    clip_norm: float | None
    log_every_n_steps: int
    val_every_n_epochs: int | None
    val_every_n_steps: int | None
    monitor: str = "val/loss"
    monitor_mode: str = "min"
    channels_last: bool = False
    on_nonfinite: str = "raise"  # or "skip", or "off" (no check: no host read per step)
    max_nonfinite_in_a_row: int = 5


@dataclass
class TrainState:
    """Where the run is; everything needed to continue it besides the weights and optimizers."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs completed
    batches_done_in_epoch: int = 0
    best_val: float | None = None  # best value of the monitored metric
    best_val_step: int | None = None
    last_train_loss: float | None = None
    last_val: dict[str, float] = field(default_factory=dict)
    stopped_by_signal: int | None = None
    skipped_steps: int = 0  # optimizer steps skipped for non-finite gradients
    nonfinite_in_a_row: int = 0


class Checkpointer(Protocol):
    """Decides by itself when to save; the loop calls it at fixed points."""

    save_seconds: list[float]  # the loop's pause per save

    def after_step(self, state: TrainState) -> None: ...
    def after_epoch(self, state: TrainState) -> None: ...
    def after_validation(self, state: TrainState, improved: bool) -> None: ...
    def save_last(self, state: TrainState) -> Path | None: ...


class NoCheckpoints:
    """``checkpoint.enabled=false``: every call does nothing."""

    save_seconds: list[float] = []  # noqa: RUF012 (never appended to)

    def save_last(self, state: TrainState) -> None:
        return None

    def after_step(self, state: TrainState) -> None:
        pass

    def after_epoch(self, state: TrainState) -> None:
        pass

    def after_validation(self, state: TrainState, improved: bool) -> None:
        pass


class StopFlag(Protocol):
    """Set asynchronously (by a signal handler); read at optimizer-step boundaries."""

    def requested(self) -> int | None: ...


class NonFiniteError(UserError):
    """Training produced a non-finite gradient; raised before the optimizer applied it."""


ADVICE_NONFINITE = (
    "lower the learning rate (optimizer.lr); then check the inputs and add gradient clipping (clip=1.0)"
)


def improves(value: float, best: float | None, mode: str) -> bool:
    """NaN never counts as best."""
    if not math.isfinite(value):
        return False
    return best is None or (value < best if mode == "min" else value > best)


def steps_per_epoch(micro_batches_per_epoch: int, micro_batches_per_step: int) -> int:
    """A short last window still makes one optimizer step."""
    return math.ceil(micro_batches_per_epoch / micro_batches_per_step)


def planned_steps(settings: LoopSettings, micro_batches_per_epoch: int) -> int:
    per_epoch = steps_per_epoch(micro_batches_per_epoch, settings.micro_batches_per_step)
    limits = [settings.max_steps] if settings.max_steps is not None else []
    if settings.max_epochs is not None:
        limits.append(settings.max_epochs * per_epoch)
    return min(limits)


def accumulation_windows(batches: Iterable, micro_batches_per_step: int) -> Iterator[list]:
    """Group micro-batches into the windows that make one optimizer step each."""
    iterator = iter(batches)
    while window := list(itertools.islice(iterator, micro_batches_per_step)):
        yield window


def clipped_norm(grad_norm: float, max_norm: float | None) -> float:
    """The total norm after ``clip_grads_with_norm_``: it scales every gradient by this same
    coefficient, so the norm follows from the norm before, without another pass over the gradients."""
    if max_norm is None:
        return grad_norm
    return grad_norm * min(max_norm / (grad_norm + 1e-6), 1.0)


def move_batch(
    inputs: torch.Tensor, targets: torch.Tensor, device: torch.device, channels_last: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """To the device (asynchronously from pinned memory on CUDA), images channels-last if asked."""
    inputs = inputs.to(device, non_blocking=True)
    if channels_last and inputs.ndim == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, targets.to(device, non_blocking=True)


def is_classification(outputs: torch.Tensor, targets: torch.Tensor) -> bool:
    """Class logits ``(N, C, ...)`` against integer targets ``(N, ...)``, as CrossEntropyLoss takes."""
    return outputs.ndim == targets.ndim + 1 and not targets.is_floating_point()


def evaluate(
    model: nn.Module,
    loader: DataLoader,
    loss_fn: Callable,
    device: torch.device,
    precision: Precision,
    channels_last: bool = False,
) -> dict[str, float]:
    """Mean validation loss (and accuracy for classification) under ``eval()`` and no_grad."""
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    samples = 0
    predictions = 0  # one per target element (per character for sequences)
    classification = False
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = move_batch(inputs, targets, device, channels_last)
            with precision.autocast():
                outputs = model(inputs)
                loss = loss_fn(outputs, targets)
            loss_sum += loss.float() * len(targets)
            samples += len(targets)
            classification = is_classification(outputs, targets)
            if classification:
                correct += (outputs.argmax(dim=1) == targets).sum()
                predictions += targets.numel()
    model.train(was_training)
    counts = sum_across_processes(torch.tensor([samples, predictions], device=device))
    loss_sum, correct = sum_across_processes(loss_sum), sum_across_processes(correct)
    metrics = {"val/loss": loss_sum / counts[0].clamp(min=1)}
    if classification:
        metrics["val/acc"] = correct.float() / counts[1].clamp(min=1)
    return to_floats(metrics)


def skip_nonfinite_step(
    state: TrainState,
    settings: LoopSettings,
    precision: Precision,
    optimizer: torch.optim.Optimizer,
    grad_norm: torch.Tensor,
) -> None:
    """Leave the weights, optimizer and schedule as they are; raise when asked to, or after too many
    skips in a row. Under loss scaling an overflow is routine: the scaler skips the step and lowers
    its scale, and it counts like any other skip."""
    where = (
        f"non-finite gradient (total norm {grad_norm.item()}) at optimizer step {state.step + 1} "
        f"(epoch {state.epoch}, micro-batch {state.batches_done_in_epoch} of the epoch)"
    )
    last_loss = (
        f"last logged loss {state.last_train_loss:.4g}"
        if state.last_train_loss is not None
        else "no loss logged yet"
    )
    if settings.on_nonfinite == "raise" and not precision.scaler.is_enabled():
        raise NonFiniteError(f"{where}; {last_loss}; the update was not applied. {ADVICE_NONFINITE}")
    if precision.scaler.is_enabled():
        precision.scaler.step(optimizer)  # sees the overflow and skips the step
        precision.scaler.update()
    state.skipped_steps += 1
    state.nonfinite_in_a_row += 1
    if state.nonfinite_in_a_row >= settings.max_nonfinite_in_a_row:
        raise NonFiniteError(
            f"{where}: {state.nonfinite_in_a_row} steps in a row skipped; {last_loss}. {ADVICE_NONFINITE}"
        )


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    loss_fn: Callable,
    train_loader: DataLoader,
    train_sampler: EpochSampler,
    val_loader: DataLoader,
    device: torch.device,
    precision: Precision,
    settings: LoopSettings,
    logger: TensorBoardLogger,
    state: TrainState | None = None,
    checkpointer: Checkpointer | None = None,
    stop: StopFlag | None = None,
    skip_grad_sync: Callable[[], AbstractContextManager] = nullcontext,
) -> TrainState:
    """Train until ``max_steps`` or ``max_epochs``, whichever comes first; return the final state."""
    state = state or TrainState()
    checkpointer = checkpointer or NoCheckpoints()
    parameters = [p for p in model.parameters() if p.requires_grad]
    micro_batches_per_epoch = math.ceil(train_sampler.samples_per_rank / train_loader.batch_size)
    total_steps = planned_steps(settings, micro_batches_per_epoch)
    progress = Progress(total_steps, initial_step=state.step)
    samples_since_log = 0
    last_log_time = time.perf_counter()
    validated_at_step = None

    def validate() -> None:
        nonlocal validated_at_step
        state.last_val = evaluate(model, val_loader, loss_fn, device, precision, settings.channels_last)
        validated_at_step = state.step
        if settings.monitor not in state.last_val:
            raise ConfigError(
                f"checkpoint.monitor={settings.monitor}, but this run's validation gives only "
                + ", ".join(state.last_val)
                + "; monitor one of those"
            )
        value = state.last_val[settings.monitor]
        improved = improves(value, state.best_val, settings.monitor_mode)
        if improved:
            state.best_val, state.best_val_step = value, state.step
        logger.log_scalars(state.step, state.last_val)
        progress.report(state.epoch, state.step, {"train/loss": state.last_train_loss, **state.last_val})
        checkpointer.after_validation(state, improved)

    model.train()
    optimizer.zero_grad(set_to_none=True)
    while state.step < total_steps:
        train_sampler.set_epoch(
            state.epoch, skip_samples=state.batches_done_in_epoch * train_loader.batch_size
        )
        for window in accumulation_windows(train_loader, settings.micro_batches_per_step):
            window_samples = sum(len(targets) for _, targets in window)
            weighted_losses = []
            for index, (inputs, targets) in enumerate(window):
                inputs, targets = move_batch(inputs, targets, device, settings.channels_last)
                # With several processes, gradients are averaged across them only on the window's
                # last micro-batch (DDP's no_sync for the others).
                last_micro_batch = index == len(window) - 1
                with nullcontext() if last_micro_batch else skip_grad_sync():
                    with precision.autocast():
                        outputs = model(inputs)
                        loss = loss_fn(outputs, targets)
                    # Weight each micro-batch's mean loss by its share of the window's samples: the
                    # summed gradient is then the gradient of the mean loss over the whole window,
                    # also for a short last window (dividing by the window count would not be).
                    # A window of one micro-batch has share 1: no multiply (bit-identical, cheaper).
                    share = len(targets) / window_samples
                    weighted_loss = loss * share if share != 1.0 else loss
                    precision.scaler.scale(weighted_loss).backward()
                weighted_losses.append(weighted_loss.detach())

            # Clip only after backward, and under loss scaling only after unscaling.
            precision.scaler.unscale_(optimizer)
            grads = [p.grad for p in parameters if p.grad is not None]
            grad_norm_before_clip = torch.nn.utils.get_total_norm(grads)
            if settings.clip_norm is not None:
                torch.nn.utils.clip_grads_with_norm_(parameters, settings.clip_norm, grad_norm_before_clip)
            lr = optimizer.param_groups[0]["lr"]
            # The non-finite guard reads one number per step (the norm above): on a GPU that is one
            # small device-to-host copy, as loss scaling does too.
            if settings.on_nonfinite == "off" or bool(torch.isfinite(grad_norm_before_clip)):
                state.nonfinite_in_a_row = 0
                precision.scaler.step(optimizer)
                precision.scaler.update()
                scheduler.step()
            else:
                skip_nonfinite_step(state, settings, precision, optimizer, grad_norm_before_clip)
            optimizer.zero_grad(set_to_none=True)

            state.step += 1
            state.batches_done_in_epoch += len(window)
            samples_since_log += window_samples

            if state.step % settings.log_every_n_steps == 0 or state.step == total_steps:
                scalars = {
                    # The window's mean loss (one micro-batch: its loss as it is, no extra op).
                    "train/loss": weighted_losses[0] if len(weighted_losses) == 1 else sum(weighted_losses),
                    "train/grad_norm": grad_norm_before_clip,
                    "train/lr": lr,
                }
                if precision.scaler.is_enabled():
                    scalars["train/loss_scale"] = precision.scaler.get_scale()
                if state.skipped_steps or settings.on_nonfinite == "skip":
                    scalars["train/skipped_steps"] = state.skipped_steps
                scalars = to_floats(scalars)
                grad_norm = scalars["train/grad_norm"]
                scalars["train/grad_norm_clipped"] = clipped_norm(grad_norm, settings.clip_norm)
                now = time.perf_counter()
                scalars["perf/samples_per_sec"] = samples_since_log / max(now - last_log_time, 1e-9)
                samples_since_log, last_log_time = 0, now
                state.last_train_loss = scalars["train/loss"]
                logger.log_scalars(state.step, scalars)
                progress.update(state.step, scalars)

            epoch_ended = state.batches_done_in_epoch == micro_batches_per_epoch
            if epoch_ended:
                state.epoch += 1
                state.batches_done_in_epoch = 0
            step_validates = settings.val_every_n_steps and state.step % settings.val_every_n_steps == 0
            epoch_validates = (
                epoch_ended and settings.val_every_n_epochs and state.epoch % settings.val_every_n_epochs == 0
            )
            if step_validates or epoch_validates:
                validate()
            if epoch_ended:
                checkpointer.after_epoch(state)
            checkpointer.after_step(state)
            if stop is not None and (signal_number := stop.requested()) is not None:
                state.stopped_by_signal = signal_number
                break
            if state.step >= total_steps:
                break
        if state.stopped_by_signal is not None:
            break

    if validated_at_step != state.step and state.stopped_by_signal is None:
        validate()
    progress.close()
    logger.flush()
    return state
