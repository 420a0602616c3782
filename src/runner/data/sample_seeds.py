"""Each sample's random draws from a seed of its own (``data.sample_seeds``): inside ``__getitem__``
torch's, Python's and numpy's global generators start from a seed derived from the run's seed, the
epoch and the sample's index, and inside the collate function from the epoch and the batch's first
index. So an augmenting data set gives the same samples whichever worker or process reads them, how
many there are and where a run resumed: ``data.num_workers`` 0, 1 or 4 train to the same weights.

torch's own worker seeding (``base_seed + worker_id``, then each worker's draws in the order it reads)
ties a sample's draws to the worker count and to what that worker read before; reseeding per sample
is what frees them. In the main process (``data.num_workers=0``) the training's own random state is
put back after each batch, as if the data set had drawn nothing: a model's dropout draws the same."""

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, Subset, TensorDataset, default_collate, get_worker_info

MASK = 2**64 - 1
SAMPLE, COLLATE = 0, 1  # what a seed is for: a sample's __getitem__, or a batch's collate function


def mix(value: int) -> int:
    """splitmix64's finaliser: nearby inputs (index 7 and 8) give unrelated 64-bit outputs."""
    value = (value + 0x9E3779B97F4A7C15) & MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK
    return value ^ (value >> 31)


def sample_seed(seed: int, epoch: int, index: int, use: int = SAMPLE) -> int:
    """The 64-bit seed of one sample's draws (or, with ``use=COLLATE``, of its batch's collate)."""
    return mix(mix(mix(mix(seed) ^ epoch) ^ index) ^ use)


def start_generators(seed: int) -> None:
    """torch's CPU generator, Python's ``random`` and numpy's global state from one 64-bit seed (numpy
    takes 32 bits). CUDA's generators are left alone: a data set draws on the CPU."""
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed >> 32)


@dataclass(frozen=True)
class HostStates:
    """The main process's CPU random states, put back after a batch's samples drew from their own."""

    torch_state: torch.Tensor
    python: Any
    numpy: Any

    @classmethod
    def now(cls) -> "HostStates":
        return cls(torch.get_rng_state(), random.getstate(), np.random.get_state())

    def restore(self) -> None:
        torch.set_rng_state(self.torch_state)
        random.setstate(self.python)
        np.random.set_state(self.numpy)


class KeyedOrder(Sampler[tuple[int, int]]):
    """The order's indices as ``(epoch, index)``: the epoch travels with each index to whichever worker
    reads it (persistent workers hold copies of the data set made at the first epoch)."""

    def __init__(self, order: Any) -> None:
        self.order = order  # an EpochSampler: its ``epoch`` is the one being read

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.order.epoch
        return ((epoch, index) for index in self.order)

    def __len__(self) -> int:
        return len(self.order)


class SeededSamples(Dataset):
    """The data set, each sample read from its own seed. Read through a loader's batches
    (``__getitems__``), the main process's states are put back by :class:`SeededCollate` once the batch
    is collated; read alone (``dataset[index]``, as epoch 0), at once."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed
        self.kept: HostStates | None = None  # the main process's, while a batch is read

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def read(self, key: tuple[int, int] | int) -> Any:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        start_generators(sample_seed(self.seed, epoch, index))
        return self.dataset[index]

    def __getitem__(self, key: tuple[int, int] | int) -> Any:
        kept = HostStates.now() if get_worker_info() is None else None
        try:
            return self.read(key)
        finally:
            if kept is not None:
                kept.restore()

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[Any]:
        if get_worker_info() is None and self.kept is None:
            self.kept = HostStates.now()
        try:
            samples = [self.read(key) for key in keys]
            epoch, first = keys[0]
            start_generators(sample_seed(self.seed, epoch, first, COLLATE))
            return samples
        except BaseException:
            self.restore()
            raise

    def restore(self) -> None:
        if self.kept is not None:
            self.kept.restore()
            self.kept = None


class SeededCollate:
    """The collate function, drawing from its batch's seed (set by :meth:`SeededSamples.__getitems__`);
    then the main process's states are put back."""

    def __init__(self, samples: SeededSamples, collate_fn: Callable | None) -> None:
        self.samples = samples
        self.collate_fn = collate_fn or default_collate

    def __call__(self, batch: list[Any]) -> Any:
        try:
            return self.collate_fn(batch)
        finally:
            self.samples.restore()


def draws_nothing(dataset: Dataset, collate_fn: Callable | None) -> bool:
    """torch's ``TensorDataset``, or a ``Subset`` of one (the default digits' split), read with torch's
    collate: indexing only, nothing to seed (the built-in data sets: the default run pays nothing for
    per-sample seeds)."""
    while type(dataset) is Subset:
        dataset = dataset.dataset
    plain = isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__
    return plain and not hasattr(dataset, "__getitems__") and collate_fn is None


def seeded(
    dataset: Dataset, order: Sampler[int], collate_fn: Callable | None, seed: int
) -> tuple[SeededSamples, KeyedOrder, SeededCollate]:
    """What a loader reads instead of ``dataset``, ``order`` and ``collate_fn`` for per-sample seeds."""
    samples = SeededSamples(dataset, seed)
    return samples, KeyedOrder(order), SeededCollate(samples, collate_fn)


def own_collate(collate_fn: Callable) -> Callable:
    """The collate function a loader was given: the user's (or torch's default) within runner's."""
    return collate_fn.collate_fn if isinstance(collate_fn, SeededCollate) else collate_fn


def same_sample(first: Any, second: Any) -> bool:
    """Two reads of one sample alike: tensors and arrays bit for bit (NaN equal to NaN), containers
    item by item, anything else by ``==``."""
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        return first.shape == second.shape and bool(torch.equal(first.nan_to_num(), second.nan_to_num()))
    if isinstance(first, np.ndarray) and isinstance(second, np.ndarray):
        return np.array_equal(first, second, equal_nan=first.dtype.kind == "f")
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same_sample(first[k], second[k]) for k in first)
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        return len(first) == len(second) and all(map(same_sample, first, second))
    try:
        return bool(first == second)
    except (TypeError, ValueError, RuntimeError):  # an object whose == is not a truth value
        return True


def reads_alike(dataset: Any, index: int = 0) -> bool | None:
    """Whether sample ``index`` comes out the same when read twice from the same seed (as each read of a
    run at one epoch is): False names a generator the run's seed does not reach (one the data set made
    for itself). None for a stream (no index). The main process's states are put back."""
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__") or len(dataset) == 0:
        return None
    inner = dataset.dataset if isinstance(dataset, SeededSamples) else dataset
    kept = HostStates.now()
    try:
        reads = []
        for _ in range(2):
            start_generators(sample_seed(0, 0, index))
            reads.append(inner[index])
    finally:
        kept.restore()
    return same_sample(*reads)
