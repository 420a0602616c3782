"""The loop's data: its loaders, each epoch's windows of micro-batches, and the epoch the run stands in,
started before the loop with its first batch checked, so a data set the engine cannot use is refused
before the run writes anything."""

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader

from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.data.loading import EpochSampler, StreamPosition, epoch_batches, read_ahead
from runner.data.stream_state import LoaderPosition
from runner.training.batches import check_structure
from runner.training.collation import first_batch
from runner.training.step import accumulation_windows


@dataclass
class Loaders:
    train: DataLoader
    sampler: EpochSampler | None  # the train loader's, set per epoch (part-way on resume); None: a stream
    val: DataLoader
    # A stream whose own state was restored from the checkpoint continues as it is; else a resumed
    # epoch skips the micro-batches it had done.
    stream_state_restored: bool = False
    stream_position: StreamPosition | LoaderPosition | None = None  # a stream that keeps its own state
    seed: int = 0  # the run's: a stream's worker seeds per pass derive from it
    # The first epoch's batches, already started by the caller (:func:`start_with_checked_batch`).
    started: Iterator[Any] | None = None


def first_epoch_batches(loaders: Loaders, state: TrainState) -> Iterator[Any]:
    """The epoch the run stands in, from where it stands: a resumed epoch skips the micro-batches it
    had done, unless the stream's own state was restored."""
    skip = 0 if loaders.stream_state_restored else state.batches_done_in_epoch
    return epoch_batches(loaders.train, loaders.sampler, state.epoch, skip, loaders.seed)


def epoch_windows(
    loaders: Loaders, state: TrainState, first: bool, micro_batches_per_step: int
) -> Iterator[tuple[list, bool]]:
    """The windows of micro-batches of the epoch the loop starts (one optimizer step each), each with
    whether the epoch ends at it. The run's first epoch continues from where the run stands (the caller
    may have started it: :func:`start_with_checked_batch`); a later one starts at its beginning. A
    stream's pass ends where it runs out: it is read one window ahead to know that at its last step."""
    if not first:
        batches = epoch_batches(loaders.train, loaders.sampler, state.epoch, 0, loaders.seed)
    else:
        batches = loaders.started if loaders.started is not None else first_epoch_batches(loaders, state)
    windows = accumulation_windows(batches, micro_batches_per_step)
    if loaders.sampler is None:  # a stream
        return read_ahead(windows, loaders.stream_position)
    return zip(windows, itertools.repeat(False))  # a map-style epoch's end is counted


def no_batch_in(epoch: int) -> UserError:
    """An epoch that yielded no batch: a stream that ran dry at once would otherwise loop forever."""
    return UserError(
        f"the training data yielded no batch in epoch {epoch}; a stream must yield at least one batch "
        "per pass"
    )


def start_with_checked_batch(
    loaders: Loaders, state: TrainState, loss_fn: Any, target_key: str,
    check: Callable[[Any], None] | None = None,
) -> Iterator[Any]:  # fmt: skip
    """Start the first epoch and check its first batch against what the engine takes (and with
    ``check``, against the model: ``fit_check.py``), so a data set it cannot use is refused (one line)
    before the run writes anything. The same iterator then trains: nothing is read twice, no random
    state moves."""
    batches = first_epoch_batches(loaders, state)
    first = first_batch(batches, loaders.train, loaders.sampler)
    if first is None:
        return iter(())
    check_structure(first, loss_fn, target_key)
    if check is not None:
        check(first)
    return itertools.chain([first], batches)
