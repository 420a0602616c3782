"""The loop's data: its loaders, and the epoch the run stands in, started before the loop with its
first batch checked, so a data set the engine cannot use is refused before the run writes anything."""

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader

from runner.checkpoint.state import TrainState
from runner.data.loading import EpochSampler, StreamPosition, epoch_batches
from runner.data.stream_state import LoaderPosition
from runner.training.batches import check_structure
from runner.training.collation import first_batch


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
