"""``data.sampler={_target_: runner.data.torch_order.TorchShuffle}``: the order a reference loop's
``DataLoader(train_set, shuffle=True, generator=torch.Generator().manual_seed(seed))`` reads, so such a
loop, written the usual way, matches runner's run step for step.

That loader draws from its generator twice each epoch: first its workers' base seed (when the epoch's
iterator starts, even without workers), then its ``RandomSampler``'s ``randperm``; so its order is not
``randperm(seed + epoch)``, nor ``RandomSampler(generator=g)`` read by a loader of its own."""

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler


class TorchShuffle(Sampler[int]):
    """Each epoch: one int64 drawn from ``generator`` (the loader's base seed), then ``randperm`` twice
    (the first is the order; ``RandomSampler`` draws the second once the first is read to its end).
    ``persistent_workers=true`` mirrors a loader with persistent workers, whose iterator (and base seed)
    is made once, at the first epoch. runner gives ``generator``, seeded with the run's ``seed``."""

    def __init__(
        self, data_source: Any, generator: torch.Generator, persistent_workers: bool = False
    ) -> None:
        self.size = len(data_source)
        self.generator = generator
        self.persistent_workers = persistent_workers
        self.started = False  # whether a first epoch's iterator drew its base seed

    def __iter__(self) -> Iterator[int]:
        if not (self.persistent_workers and self.started):
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)  # the base seed
        self.started = True
        yield from torch.randperm(self.size, generator=self.generator).tolist()
        # RandomSampler then yields the first num_samples % n of another randperm: none, but drawn.
        torch.randperm(self.size, generator=self.generator)

    def __len__(self) -> int:
        return self.size

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "started": self.started}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.started = state["started"]
