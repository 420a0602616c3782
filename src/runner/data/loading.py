"""DataLoaders built by the engine's side, so it controls batching, order, seeding and sharding."""

import math
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


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

    def epoch_order(self) -> list[int]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.dataset_size, generator=generator).tolist()
        else:
            order = list(range(self.dataset_size))
        padding = self.samples_per_rank * self.world_size - self.dataset_size
        order += order[:padding]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_order()[self.skip_samples :])

    def __len__(self) -> int:
        return self.samples_per_rank - self.skip_samples


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
) -> tuple[DataLoader, DataLoader, EpochSampler]:
    """Train and validation loaders; the train sampler is returned to be stepped per epoch."""
    train_sampler = EpochSampler(len(train_set), shuffle, seed, rank, world_size)
    val_sampler = EpochSampler(len(val_set), False, seed, rank, world_size)
    common = {
        "batch_size": batch_size,
        "num_workers": num_workers,
        "pin_memory": pin_memory,
        "persistent_workers": num_workers > 0,
    }
    # The generator seeds the workers' random, numpy and torch states.
    worker_seeds = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_set, sampler=train_sampler, generator=worker_seeds, **common)
    val_loader = DataLoader(val_set, sampler=val_sampler, **common)
    return train_loader, val_loader, train_sampler
