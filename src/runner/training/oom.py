"""Out of memory, survived with the math unchanged (``on_oom=split``, the default).

A ``torch.OutOfMemoryError`` in a training step frees what the failed micro-batches held, halves the
micro-batch and redoes the same window from its start, on the same samples and random state. The loader
still yields the batches of ``data.batch_size``: each is cut into micro-batches of the smaller size in
its own order, so the data order, the window's items and the step's gradient (accumulation is weighted
by items, ``step.py``) are those of a run configured ``data.batch_size=16`` with twice the
accumulation.

With several processes (``strategy=ddp`` and ``on_oom=split``: the agreeing step, ``agreeing_step.py``),
every process says after the window's backward whether it ran out (one small collective on the CPU): a
process that runs out tells the others where they ask, and all split at the same step. With
``strategy=fsdp`` (its parameter gathers are inside the forward, where one process cannot leave) it
still stops, in one line.
"""

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.training.batches import count_samples, map_tensors
from runner.training.carried import NoCarriedState, carried_state_of
from runner.training.distributed import any_process
from runner.training.memory_agreement import Agreement, OutOfMemoryOnRank
from runner.training.random_state import host_states_changed, random_states
from runner.training.step import Learner, StepResult

log = logging.getLogger("runner")
T = TypeVar("T")
TAG = "vitals/micro_batch_size"
ADVICE = "precision=bf16 (or amp on a GPU), activation_checkpointing=true, or strategy=fsdp over several GPUs"


SEVERAL = "with several processes (the others are already in this step's collective operations)"


class OutOfMemoryStop(UserError):
    """The run stops for memory: ``on_oom=raise``, or a micro-batch of one sample still too large. The
    run saves ``last.pt`` (``experiment/finish.py``)."""


class OutOfMemoryUnsaved(UserError):
    """The same, where the state is not saved: with several processes (the others wait in a collective;
    a sharded save would wait for them), or in the optimizer's update (the weights may be part-updated)."""


def stop(message: str, processes: int, in_update: bool = False) -> UserError:
    return OutOfMemoryStop(message) if processes == 1 and not in_update else OutOfMemoryUnsaved(message)


def raised_in(error: BaseException, updaters: tuple[Any, ...]) -> bool:
    """Whether the error came from inside a method of one of ``updaters`` (the optimizer's or the loss
    scaler's step: it may have updated some weights already, an optimizer's state is made at its first
    step, so the window cannot be redone)."""
    traceback = error.__traceback__
    while traceback is not None:
        if any(traceback.tb_frame.f_locals.get("self") is updater for updater in updaters):
            return True
        traceback = traceback.tb_next
    return False


@dataclass(frozen=True)
class OutOfMemory:
    """One out-of-memory error, as the halving decides from it (the error itself is let go: its
    traceback holds the failed micro-batch's activations)."""

    size: int | None  # the size that did not fit; None: the loader's batches as they are
    where: str  # " on rank N": another process ran out and every process learnt it; "": here
    in_update: bool  # inside one of the updaters' methods


def halving(
    attempt: Callable[[int | None], T],
    size: int | None,
    smaller: Callable[[OutOfMemory], int],
    updaters: tuple[Any, ...] = (),
) -> T:
    """``attempt(size)``, tried again with ``smaller(failure)`` on each out-of-memory error until it
    fits: the one loop of a step, a validation and the first-batch check. ``smaller`` frees memory,
    settles the size every process takes and returns it (a half), or raises where the run stops."""
    while True:
        try:
            return attempt(size)
        except (torch.OutOfMemoryError, OutOfMemoryOnRank) as error:
            # The rest outside the except: the traceback holds the failed micro-batch's activations.
            where = f" on rank {error.rank}" if isinstance(error, OutOfMemoryOnRank) else ""
            failure = OutOfMemory(size, where, raised_in(error, updaters))
        size = smaller(failure)


def cut(batch: Any, size: int, target_key: str) -> list[Any]:
    """``batch`` as micro-batches of ``size`` samples, in order, each a copy (fresh memory, as a
    loader's own batch of that size). Tensors and lists of the batch's length are cut; anything else
    (a scalar, a tensor of another length) goes with every part."""
    samples = count_samples(batch, target_key)
    if size >= samples:
        return [batch]
    return [_part(batch, start, size, samples) for start in range(0, samples, size)]


def _part(value: Any, start: int, size: int, samples: int) -> Any:
    def per_sample(item: Any) -> bool:  # one entry per sample (strings, ids): cut, not walked into
        if not isinstance(item, tuple | list) or len(item) != samples:
            return False
        return not any(isinstance(each, torch.Tensor) for each in item)

    def piece(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            batched = item.ndim > 0 and len(item) == samples
            return item[start : start + size].clone() if batched else item
        return item[start : start + size]

    return map_tensors(value, piece, per_sample)


def free_memory(learner: Learner) -> None:
    """What the failed micro-batches held: their gradients; their activations went with the error's
    frames. On a GPU the cached blocks go back too, so the smaller micro-batch finds them."""
    learner.optimizer.zero_grad(set_to_none=True)
    if learner.device.type == "cuda":
        torch.cuda.empty_cache()


def stop_message(where: str, state: TrainState, on_oom: str, reason: str = "", processes: int = 1) -> str:
    """``where``: "micro-batch 32" or "validation batch 32"; ``reason``: why it is not split. With several
    processes the others wait in a collective: none saves, the run's newest checkpoint is the one."""
    where = f"out of memory at {where}, optimizer step {state.step + 1}"
    kept = (
        f"the state of step {state.step} is kept (last.pt, with checkpoint.enabled)"
        if processes == 1
        else "the other processes cannot save now: resume from the run's newest checkpoint"
    )
    smaller = "lower data.batch_size and raise accumulate (the same steps)"
    if on_oom == "raise":
        return f"{where} (on_oom=raise): {kept}; set on_oom=split, or {smaller}; or try {ADVICE}"
    if reason:
        return f"{where}: {reason}, a micro-batch is not split; {kept}; {smaller}, or try {ADVICE}"
    return f"{where}: even one sample at a time does not fit in the device's memory; {kept}; try {ADVICE}"


def update_message(state: TrainState, own_step: bool = False) -> str:
    where, why = (
        ("in a step the model writes", "(an update in its training_step may have applied)")
        if own_step
        else ("in the optimizer's update", "(its state, made at its first step, does not fit)")
    )
    return (
        f"out of memory {where} at optimizer step {state.step + 1} {why}: some weights may be updated "
        "already, so the step is not redone "
        f"and no last.pt is saved; resume from the run's newest checkpoint with less memory in use: {ADVICE}"
    )


def why_not_split(learner: Learner, told: bool) -> str:
    """``told``: every process learnt it (``memory_agreement.py``); not where it ran out between the
    points where they agree."""
    if learner.processes > 1 and not (learner.step.agreement.enabled and told):
        return SEVERAL
    if not isinstance(carried_state_of(learner.plain_model), NoCarriedState):
        return "with a model that carries a state from batch to batch (its state is per batch)"
    return ""


def buffers_to_keep(learner: Learner) -> list[torch.Tensor]:
    """The model's saved tensors outside its parameters (BatchNorm's running statistics): a forward that
    ran out of memory may have updated some already, so a redone window starts from copies. All of them
    for the first window; from then on only those it changed (a causal mask is not copied every step)."""
    if learner.changing_buffers is not None:
        return learner.changing_buffers
    saved = learner.plain_model.state_dict(keep_vars=True).values()  # extra state may be any object
    tensors = [value for value in saved if isinstance(value, torch.Tensor)]
    return [tensor for tensor in tensors if not isinstance(tensor, torch.nn.Parameter)]


def step_within_memory(
    learner: Learner,
    window: list,
    state: TrainState,
    on_oom: str,
    log_scalar: Callable[[str, float, int], None],
    run_step: Callable[[list], StepResult],
) -> StepResult:
    """``run_step(micro_batches)`` on the window cut to the run's micro-batch
    (``state.micro_batch_size``; None: the loader's), halved and redone from the window's start on
    each out-of-memory error until it fits. Its new size is logged at the step it starts with."""
    split = on_oom == "split"
    # What a redo restores, kept before every window: torch's generators (a few microseconds), and
    # Python's and numpy's only where the first window drew from them (copying them costs more than the
    # rest of runner's work in a small model's step).
    saved = random_states(host=learner.draws_host_random is not False) if split else None
    buffers = [(buffer, buffer.clone()) for buffer in buffers_to_keep(learner)] if split else []

    def attempt(size: int | None) -> StepResult:
        if size is None:  # the loader's batches as they are, until one did not fit: nothing cut per step
            micro_batches = window
        else:
            micro_batches = [part for batch in window for part in cut(batch, size, learner.target_key)]
        result = run_step(micro_batches)
        if learner.changing_buffers is None and split:
            learner.changing_buffers = [kept for kept, copy in buffers if not torch.equal(kept, copy)]
        if learner.draws_host_random is None and split:
            learner.draws_host_random = host_states_changed(saved)
        return result

    def smaller(failure: OutOfMemory) -> int:
        free_memory(learner)
        size = failure.size or max(count_samples(batch, learner.target_key) for batch in window)
        where = failure.where
        if where:  # every process learnt it here: all halve the same size (their batches may differ)
            size = any_process(size)
        own_step = learner.step.writes_own
        if failure.in_update or own_step:
            raise stop(update_message(state, own_step), learner.processes, in_update=True)
        reason = why_not_split(learner, told=bool(where))
        if on_oom == "raise" or reason or size == 1:
            # Where all processes learnt it, all stop here alike and can save, as one process does.
            alike = 1 if where else learner.processes
            raise stop(stop_message(f"micro-batch {size}", state, on_oom, reason, alike), alike)
        saved.restore()
        for buffer, kept in buffers:
            buffer.copy_(kept)
        state.micro_batch_size = size // 2
        parts = sum(len(cut(batch, size // 2, learner.target_key)) for batch in window)
        if learner.step.agreement.rank == 0:  # one line per split: every process takes it alike
            message = "out of memory at micro-batch %d%s: continuing with %d x %d per step"
            log.warning(message, size, where, size // 2, parts)
        log_scalar(TAG, float(size // 2), state.step + 1)
        return state.micro_batch_size

    updaters = (learner.optimizer, learner.precision.scaler)
    return halving(attempt, state.micro_batch_size, smaller, updaters)


def evaluate_within_memory(
    learner: Learner,
    loader: Iterable,
    state: TrainState,
    on_oom: str,
    run_evaluation: Callable[[Iterable], dict[str, float]],
) -> dict[str, float]:
    """``run_evaluation(batches)`` over the loader's batches cut to the run's micro-batch, halved and
    started again on each out-of-memory error (validation sums over items: its values do not change).
    With several processes all start again together (:class:`Agreement`), or stop where they cannot
    agree (FSDP)."""

    def attempt(size: int | None) -> dict[str, float]:
        return run_evaluation(_cut_all(loader, size, learner.target_key) if size else loader)

    def smaller(failure: OutOfMemory) -> int:
        free_memory(learner)
        size, where = failure.size or _loader_size(loader, learner.target_key), failure.where
        if where:  # every process learnt it here: all halve the same size
            size = any_process(size)
        reason = SEVERAL if learner.processes > 1 and not (learner.step.agreement.enabled and where) else ""
        if on_oom == "raise" or size == 1 or reason:
            alike = 1 if where else learner.processes
            message = stop_message(f"validation batch {size}", state, on_oom, reason, alike)
            raise stop(message, alike)
        state.micro_batch_size = size // 2
        if learner.step.agreement.rank == 0:
            log.warning(
                "out of memory in validation at batch %d%s: continuing with %d", size, where, size // 2
            )
        return state.micro_batch_size

    return halving(attempt, state.micro_batch_size, smaller)


def _cut_all(loader: Iterable, size: int, target_key: str) -> Iterator[Any]:
    for batch in loader:
        yield from cut(batch, size, target_key)


def _loader_size(loader: Iterable, target_key: str) -> int:
    size = getattr(loader, "batch_size", None)
    return size if isinstance(size, int) else count_samples(next(iter(loader)), target_key)


def first_part_within_memory(
    run: Callable[[Any], Any], batch: Any, target_key: str, memory: Agreement | None = None
) -> tuple[Any, int]:
    """``run`` on the batch, or on its first half, quarter, ... where the whole does not fit in memory:
    what the first-batch check needs (whether model, data and loss fit together) is in any part. Returns
    what ``run`` returned and the part's size. With several processes all halve alike (``memory``)."""
    memory = memory or Agreement()

    def attempt(size: int | None) -> tuple[Any, int]:
        with memory.evaluation():
            return run(cut(batch, size, target_key)[0]), size

    def smaller(failure: OutOfMemory) -> int:
        size = failure.size
        if memory.enabled:  # every process is here: all halve the same size
            size = any_process(size)
        several = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
        if size == 1 or (several and not memory.enabled):
            raise OutOfMemoryStop(
                f"out of memory in the first-batch check, on {size} sample(s): the model and the batch "
                "do not fit in the device's memory; lower data.batch_size and raise accumulate (the "
                f"same steps), or try {ADVICE}"
            )
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return size // 2

    return halving(attempt, count_samples(batch, target_key), smaller)
