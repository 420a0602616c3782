"""DataLoaders built by the engine's side, so it controls batching, order, seeding and sharding."""

import copy
import itertools
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from runner.config.errors import UserError
from runner.data.sample_seeds import draws_nothing, seeded
from runner.data.stream_state import LoaderPosition, keeps_own_position, training_loader_class


class EpochSampler(Sampler[int]):
    """Sample order that depends only on ``(seed, epoch)``: the same run always sees the same
    batches, and a resumed run can start any epoch at any batch.

    With several processes each rank takes every ``world_size``-th index of the epoch's order,
    padded so every rank gets the same number of samples, as ``DistributedSampler`` does.
    """

    def __init__(
        self, dataset_size: int, shuffle: bool, seed: int, rank: int = 0, world_size: int = 1
    ) -> None:
        self.dataset_size = dataset_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.samples_per_rank = math.ceil(dataset_size / world_size)
        self.epoch = 0
        self.skip_samples = 0

    def set_epoch(self, epoch: int, skip_samples: int = 0) -> None:
        """Select the epoch's order; ``skip_samples`` resumes part-way through it."""
        self.epoch = epoch
        self.skip_samples = skip_samples

    def base_order(self) -> list[int]:
        """The whole epoch's order, before it is split across processes."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            return torch.randperm(self.dataset_size, generator=generator).tolist()
        return list(range(self.dataset_size))

    def epoch_order(self) -> list[int]:
        order = self.base_order()
        padding = self.samples_per_rank * self.world_size - self.dataset_size
        order += order[:padding]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_order()[self.skip_samples :])

    def __len__(self) -> int:
        return self.samples_per_rank - self.skip_samples


class SamplerOrder(EpochSampler):
    """The order of a sampler of the user's (``data.sampler``): each epoch's indices are drawn from it
    once, at the epoch's start, then split across processes and resumed part-way as runner's own
    order is. A checkpoint holds the epoch's order and the sampler's state after drawing it (its
    ``state_dict``, else its ``generator``'s state), all tensors and numbers: a resumed run finishes
    the epoch in the same order and draws the next ones as the uninterrupted run would."""

    def __init__(
        self, sampler: Sampler[int], rank: int = 0, world_size: int = 1, samples: int | None = None
    ) -> None:
        super().__init__(sampler_length(sampler), shuffle=False, seed=0, rank=rank, world_size=world_size)
        self.sampler = sampler
        self.samples = samples  # the data set's: every index is below it
        self.order: list[int] = []
        self.order_epoch: int | None = None  # the epoch ``order`` was drawn for

    def base_order(self) -> list[int]:
        """Drawn once per epoch, when the epoch is first read (or restored from a checkpoint)."""
        if self.order_epoch != self.epoch:
            if hasattr(self.sampler, "set_epoch"):  # DistributedSampler's protocol: an order per epoch
                self.sampler.set_epoch(self.epoch)
            order = [sample_index(index, self.sampler, self.epoch, self.samples) for index in self.sampler]
            if len(order) != self.dataset_size:
                raise UserError(
                    f"data.sampler ({type(self.sampler).__name__}) gave {len(order)} indices in epoch "
                    f"{self.epoch}, but its len() is {self.dataset_size}; a sampler must give len() "
                    "indices each epoch"
                )
            self.order, self.order_epoch = order, self.epoch
        return list(self.order)

    def state_dict(self) -> dict[str, Any]:
        own = self.sampler.state_dict() if hasattr(self.sampler, "state_dict") else None
        generator = getattr(self.sampler, "generator", None)
        return {
            "epoch": self.order_epoch,
            "order": torch.tensor(self.order, dtype=torch.int64),
            "sampler": own,
            "generator": generator.get_state()
            if own is None and isinstance(generator, torch.Generator)
            else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        order = state["order"].tolist()
        outside = [i for i in order if not 0 <= i < (self.samples or self.dataset_size)][:1]
        drawn = state["epoch"] is not None  # else none was drawn yet: the order is empty
        if (drawn and len(order) != self.dataset_size) or outside:
            raise UserError(
                f"the checkpoint's sampler_state_dict holds an order of {len(order)} indices"
                + (f" with {outside[0]}" if outside else "")
                + f"; data.sampler gives {self.dataset_size} indices of a data set of "
                f"{self.samples or self.dataset_size} samples: resume with the data and sampler it was saved "
                "with"
            )
        self.order, self.order_epoch = order, state["epoch"]
        if state["sampler"] is not None:
            self.sampler.load_state_dict(state["sampler"])
        elif state["generator"] is not None:
            self.sampler.generator.set_state(state["generator"])


def sampler_length(sampler: Sampler[int]) -> int:
    """``len(data.sampler)``: how many indices it gives each epoch; one line where it has none."""
    try:
        return len(sampler)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError) as error:  # no __len__; a negative or huge one
        raise UserError(
            f"data.sampler ({type(sampler).__name__}) has no usable len() ({error}); a sampler says how many "
            "indices it gives each epoch"
        ) from None


def sample_index(index: Any, sampler: Sampler, epoch: int, samples: int | None = None) -> int:
    """One index of ``data.sampler``'s order: a whole number (a Python, NumPy or 0-d tensor integer)
    below ``samples``, the data set's size (-1 would quietly be the last sample); anything else, such
    as a batch sampler's list of indices, is named in one line."""
    try:
        found = operator.index(index)
        if samples is not None and not 0 <= found < samples:
            raise UserError(
                f"data.sampler ({type(sampler).__name__}) gave index {found} in epoch {epoch}; the training "
                f"set has {samples} samples, so an index is in [0, {samples - 1}]"
            )
        return found
    except TypeError:
        shown = f"{type(index).__name__} {index!r}"
        raise UserError(
            f"data.sampler ({type(sampler).__name__}) gave {shown[:80]} in epoch {epoch}; a sampler gives "
            "one sample's index at a time (a batch sampler's lists of indices are not taken: data.batch_size "
            "makes the batches)"
        ) from None


def is_stream(dataset: Any) -> bool:
    """An ``IterableDataset``: no length, no sampler; training runs to ``trainer.max_steps``."""
    return isinstance(dataset, IterableDataset)


def make_loader(
    dataset: Dataset,
    batch_size: int,
    seed: int,
    pin_memory: bool,
    num_workers: int = 0,
    sampler: EpochSampler | None = None,
    drop_last: bool = False,
    collate_fn: Callable | None = None,
    sample_seeds: bool = False,
    loader_class: Callable[..., DataLoader] = DataLoader,
    prefetch_factor: int | None = None,
    persistent_workers: bool = True,
) -> DataLoader:
    """A loader with its own generator: starting it draws nothing from the global random state (the
    workers' base seed comes from the generator), so validating never changes the training. A
    stream's workers are started afresh each pass, so each pass's copy of the data set carries its
    ``set_epoch``. ``sample_seeds`` (``data.sample_seeds``, with a ``sampler``): each sample draws from
    a seed of its own (``sample_seeds.py``). ``prefetch_factor`` and ``persistent_workers`` apply with
    workers (``data.*``; torch's default read-ahead for None)."""
    persistent = persistent_workers and num_workers > 0 and not is_stream(dataset)
    loader_sampler: Sampler | None = sampler
    if sample_seeds and sampler is not None and not draws_nothing(dataset, collate_fn):
        dataset, loader_sampler, collate_fn = seeded(dataset, sampler, collate_fn, seed)
    return loader_class(
        dataset, batch_size=batch_size, sampler=loader_sampler, num_workers=num_workers,
        pin_memory=pin_memory, persistent_workers=persistent, drop_last=drop_last, collate_fn=collate_fn,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip


def make_loaders(
    train_set: Dataset,
    val_set: Dataset,
    batch_size: int,
    shuffle: bool,
    num_workers: int,
    seed: int,
    pin_memory: bool,
    rank: int = 0,
    world_size: int = 1,
    val_batch_size: int | None = None,
    drop_last: bool = False,
    collate_fn: Callable | None = None,
    order: Sampler[int] | None = None,
    val_collate_fn: Callable | None = None,
    sample_seeds: bool = False,
    prefetch_factor: int | None = None,
    persistent_workers: bool = True,
) -> tuple[DataLoader, DataLoader, EpochSampler | None]:
    """Train and validation loaders; the train sampler (``None`` for a stream) is returned to be
    stepped per epoch. ``order``: a sampler of the user's that orders the training set instead of
    ``randperm(seed + epoch)``. ``sample_seeds``: each sample of a map-style set draws from a seed of
    its own. Validation never drops a batch; its batches are collated by ``val_collate_fn``,
    ``collate_fn`` when None (a collator for training only, Mixup, gives another)."""
    if is_stream(train_set):
        train_sampler = None
    elif order is not None:
        train_sampler = SamplerOrder(order, rank, world_size, samples=len(train_set))
    else:
        train_sampler = EpochSampler(len(train_set), shuffle, seed, rank, world_size)
    val_sampler = None if is_stream(val_set) else EpochSampler(len(val_set), False, seed, rank, world_size)
    common = {"seed": seed, "pin_memory": pin_memory, "num_workers": num_workers, "collate_fn": collate_fn,
              "sample_seeds": sample_seeds, "prefetch_factor": prefetch_factor,
              "persistent_workers": persistent_workers}  # fmt: skip
    train_loader = make_loader(
        train_set, batch_size, sampler=train_sampler, drop_last=drop_last,
        loader_class=training_loader_class(train_set, num_workers), **common,
    )  # fmt: skip
    val_common = {**common, "collate_fn": val_collate_fn or collate_fn}
    val_loader = make_loader(val_set, val_batch_size or batch_size, sampler=val_sampler, **val_common)
    return train_loader, val_loader, train_sampler


def batches_per_epoch(loader: DataLoader, sampler: EpochSampler | None) -> int | None:
    """Micro-batches in one whole epoch of this rank; ``None`` for a stream (unknown until it ends)."""
    if sampler is None:
        return None
    if loader.drop_last:
        return sampler.samples_per_rank // loader.batch_size
    return math.ceil(sampler.samples_per_rank / loader.batch_size)


def epoch_batches(
    loader: DataLoader, sampler: EpochSampler | None, epoch: int, skip_batches: int, seed: int = 0
) -> Iterator[Any]:
    """The epoch's batches from ``skip_batches`` on. A map-style set starts its order there; a
    stream is read from its start and the skipped batches discarded (a stream with a ``set_epoch``
    method is told the epoch first, and its workers' seeds depend only on ``(seed, epoch)``, so a
    resumed pass reads what the interrupted one did)."""
    if sampler is not None:
        sampler.set_epoch(epoch, skip_samples=skip_batches * loader.batch_size)
        return iter(loader)
    if hasattr(loader.dataset, "set_epoch"):
        loader.dataset.set_epoch(epoch)
    loader.generator.manual_seed(seed + epoch)
    return itertools.islice(iter(loader), skip_batches, None)


class StreamPosition:
    """A stream's own state (its ``state_dict``) as of the batches trained, not as of the batches
    read ahead: what a checkpoint saves (as ``dataset_state_dict``), so a resumed run reads on from
    exactly there. Read by workers, the loader's state is saved instead (``stream_state.py``)."""

    name = "dataset"

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.trained: Any = None

    def read(self) -> Any:
        return copy.deepcopy(self.dataset.state_dict())

    def after_pass(self) -> Any:
        return self.read()

    def state_dict(self) -> Any:
        return self.trained if self.trained is not None else self.read()

    def load_state_dict(self, state: Any) -> None:
        self.dataset.load_state_dict(state)


def stream_position(loader: DataLoader, dataset: Any) -> StreamPosition | LoaderPosition | None:
    """Where the training stream stands, for the checkpoints: the data set's own state read in this
    process, or the workers' through torchdata's loader; None when it cannot be kept (a resume then
    reads the pass again from its start and skips the batches done)."""
    if not keeps_own_position(dataset):
        return None
    if loader.num_workers == 0:
        return StreamPosition(dataset)
    return LoaderPosition(loader) if hasattr(loader, "load_state_dict") else None


def read_ahead(
    windows: Iterator[list], position: StreamPosition | LoaderPosition | None
) -> Iterator[tuple[list, bool]]:
    """Each window of a stream with whether it is the pass's last, known by reading the next one
    first: the pass ends at its last step, as a map-style epoch does. ``position`` (a stream that
    keeps its own state) is set to the state after each window as it is trained, and after the end
    of the pass for the last one."""
    window = next(windows, None)
    state = position.read() if position else None
    while window is not None:
        following = next(windows, None)
        following_state = None
        if position is not None:
            following_state = position.read() if following is not None else position.after_pass()
            position.trained = following_state if following is None else state
        yield window, following is None
        window, state = following, following_state
