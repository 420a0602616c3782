"""Test plug-ins for the batch contract: data sets yielding dicts, dataclasses, variable-length items and
streams, a transformers-style model, a model with norm layers, a callback that records its hooks."""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

NUM_FEATURES, NUM_CLASSES = 6, 3


def blobs(num: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (num,), generator=generator)
    inputs = torch.randn(num, NUM_FEATURES, generator=generator) + labels[:, None].float()
    return inputs, labels


def pairs(num_train: int = 70, num_val: int = 30) -> tuple[TensorDataset, TensorDataset]:
    return TensorDataset(*blobs(num_train, 1)), TensorDataset(*blobs(num_val, 2))


class DictSet(Dataset):
    """Items ``{"features": x, "labels": y}``, as a tokenizer-style data set yields them."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, target_key: str = "labels"):
        self.inputs, self.labels, self.target_key = inputs, labels, target_key

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"features": self.inputs[index], self.target_key: self.labels[index]}


def dicts(num_train: int = 70, num_val: int = 30, target_key: str = "labels") -> tuple[DictSet, DictSet]:
    return DictSet(*blobs(num_train, 1), target_key), DictSet(*blobs(num_val, 2), target_key)


def with_test_split(num_train: int = 70, num_val: int = 30, num_test: int = 20):
    return (
        TensorDataset(*blobs(num_train, 1)),
        TensorDataset(*blobs(num_val, 2)),
        TensorDataset(*blobs(num_test, 3)),
    )


def triples(num_train: int = 32, num_val: int = 16) -> tuple[TensorDataset, TensorDataset]:
    """(input, target, weight): not a batch the engine takes with an external loss."""
    train, val = blobs(num_train, 1), blobs(num_val, 2)
    return TensorDataset(*train, torch.ones(num_train)), TensorDataset(*val, torch.ones(num_val))


class FeatureModel(nn.Module):
    """Takes its input by keyword, as ``model(**batch)`` passes it; ignores other keys."""

    def __init__(self, hidden: int = 16, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(NUM_FEATURES, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, NUM_CLASSES)
        )

    def forward(self, features: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
        return self.net(features)


def mlp(hidden: int = 16, dropout: float = 0.0) -> nn.Module:
    """The same layers as :class:`FeatureModel`, created in the same order: the same initial weights."""
    return FeatureModel(hidden, dropout).net


@dataclass
class Output:
    loss: torch.Tensor | None
    logits: torch.Tensor


class OwnLossModel(nn.Module):
    """transformers' convention: ``forward(features, labels=None)`` returns ``.loss`` and ``.logits``."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.net = mlp(hidden)

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> Output:
        logits = self.net(features)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return Output(loss, logits)


class NormModel(nn.Module):
    """Linear layers with biases and a LayerNorm whose parameters are named without "norm"."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.inner = nn.Linear(NUM_FEATURES, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.ln(self.inner(inputs))))


@dataclass
class Batch:
    features: torch.Tensor
    labels: torch.Tensor


def collate_dataclass(items: list[dict[str, torch.Tensor]]) -> Batch:
    return Batch(
        torch.stack([item["features"] for item in items]), torch.stack([item["labels"] for item in items])
    )


class Sequences(Dataset):
    """Variable-length token sequences: torch's default collate cannot stack them."""

    def __init__(self, num: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.items = [torch.randint(1, 20, (int(length),), generator=generator)
                      for length in torch.randint(3, 9, (num,), generator=generator)]  # fmt: skip

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"tokens": self.items[index], "labels": self.items[index] % NUM_CLASSES}


def sequences(num_train: int = 40, num_val: int = 12) -> tuple[Sequences, Sequences]:
    return Sequences(num_train, 1), Sequences(num_val, 2)


class PadCollator:
    """Pads ``tokens`` with 0 and ``labels`` with -100 (ignored by the loss and the metrics)."""

    def __init__(self, pad_id: int = 0):
        self.pad_id = pad_id

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        pad = nn.utils.rnn.pad_sequence
        return {
            "tokens": pad([item["tokens"] for item in items], batch_first=True, padding_value=self.pad_id),
            "labels": pad([item["labels"] for item in items], batch_first=True, padding_value=-100),
        }


class TokenTagger(nn.Module):
    """Per-token class scores ``(N, C, T)`` for padded ``tokens``."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.embedding = nn.Embedding(20, hidden)
        self.head = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, tokens: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(tokens)).transpose(1, 2)


class Stream(IterableDataset):
    """A finite stream of pairs, read in order."""

    def __init__(self, num: int, seed: int):
        self.inputs, self.labels = blobs(num, seed)
        self.position = 0

    def __iter__(self):
        while self.position < len(self.labels):
            index = self.position
            self.position += 1
            yield self.inputs[index], self.labels[index]
        self.position = 0


class PositionedStream(Stream):
    """A stream that keeps its own position: runner saves and restores it."""

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def stream(num_train: int = 40, num_val: int = 16, with_state: bool = False):
    kind = PositionedStream if with_state else Stream
    return kind(num_train, 1), TensorDataset(*blobs(num_val, 2))


class Recorder:
    """Records the hooks it sees, logs a scalar every step and stops the run at ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        self.stop_at = stop_at
        self.calls: list[tuple[str, int]] = []
        self.steps_seen = 0
        self.step_data: list[tuple] = []  # per step: the batch's and the outputs' shapes
        self.extra_validations: list[bool] = []  # per validation: off the run's cadence

    def on_train_start(self, context) -> None:
        self.calls.append(("on_train_start", context.step))

    def on_step_end(self, context) -> None:
        self.steps_seen += 1
        context.log("custom/steps_seen", self.steps_seen)
        inputs, targets = context.batch
        outputs = context.outputs
        self.step_data.append((tuple(inputs.shape), tuple(targets.shape), tuple(outputs.shape),
                               outputs.requires_grad))  # fmt: skip
        # A tensor that requires grad: context.log detaches it.
        context.log("custom/weight_sum", sum(p.sum() for p in context.model.parameters()))
        if self.stop_at is not None and context.step == self.stop_at:
            context.request_stop(f"the recorder stops at step {self.stop_at}")

    def on_validation_end(self, context) -> None:
        self.calls.append(("on_validation_end", context.step))
        self.extra_validations.append(context.extra_validation)
        assert "val/loss" in context.metrics

    def on_epoch_end(self, context) -> None:
        self.calls.append(("on_epoch_end", context.epoch))

    def on_train_end(self, context) -> None:
        self.calls.append(("on_train_end", context.step))
        RECORDED.append(self)

    def state_dict(self) -> dict:
        return {"steps_seen": self.steps_seen}

    def load_state_dict(self, state: dict) -> None:
        self.steps_seen = state["steps_seen"]


class ImageLogger:
    """Logs a batch of images as if it were a scalar: the mistake context.log names."""

    def on_step_end(self, context) -> None:
        context.log("custom/images", torch.rand(4, 3, 8, 8))


RECORDED: list[Recorder] = []  # the tests read the recorders of the runs they start


class CountingPairs(TensorDataset):
    """Counts its reads: a data set with its own state (a generator, a cache) sees each read."""

    reads = 0

    def __getitem__(self, index: int):
        CountingPairs.reads += 1
        return super().__getitem__(index)


def counting_pairs(num_train: int = 70, num_val: int = 30) -> tuple[CountingPairs, TensorDataset]:
    CountingPairs.reads = 0
    return CountingPairs(*blobs(num_train, 1)), TensorDataset(*blobs(num_val, 2))


class RecordingPairs(TensorDataset):
    """Records the index of every read, in order: the data order a run trained on."""

    read: ClassVar[list[int]] = []

    def __getitem__(self, index: int):
        RecordingPairs.read.append(int(index))
        return super().__getitem__(index)


def recording_pairs(num_train: int = 70, num_val: int = 30) -> tuple[RecordingPairs, TensorDataset]:
    RecordingPairs.read = []
    return RecordingPairs(*blobs(num_train, 1)), TensorDataset(*blobs(num_val, 2))


class CountedShuffle:
    """A user's own order: each epoch a permutation drawn from its seed and the number of epochs drawn so
    far, which it keeps as its state (state_dict/load_state_dict)."""

    def __init__(self, data_source, seed: int):
        self.size, self.seed, self.draws = len(data_source), seed, 0

    def __iter__(self):
        generator = torch.Generator().manual_seed(1000 * self.seed + self.draws)
        self.draws += 1
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self) -> int:
        return self.size

    def state_dict(self) -> dict:
        return {"draws": self.draws}

    def load_state_dict(self, state: dict) -> None:
        self.draws = state["draws"]


class EpochNoiseStream(Stream):
    """Each pass adds noise drawn in the reading process (a worker) and shifts by the epoch it was told."""

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        for inputs, label in super().__iter__():
            yield inputs + 0.1 * torch.randn(NUM_FEATURES) + self.epoch, label


def noisy_stream(num_train: int = 40, num_val: int = 16):
    return EpochNoiseStream(num_train, 1), TensorDataset(*blobs(num_val, 2))


class RecentLosses:
    """Keeps its state in a deque and a numpy number: not what a safely loaded checkpoint can hold."""

    def __init__(self):
        import collections

        import numpy as np

        self.recent, self.mean = collections.deque(maxlen=3), np.float64(0.0)

    def state_dict(self) -> dict:
        return {"recent": self.recent, "mean": self.mean}

    def load_state_dict(self, state: dict) -> None:
        self.recent, self.mean = state["recent"], state["mean"]


class Buckets:
    """A batch sampler (lists of indices, as a length-bucketing sampler gives), named as data.sampler."""

    def __init__(self, data_source, batch_size: int = 8):
        self.size, self.batch_size = len(data_source), batch_size

    def __iter__(self):
        return iter([list(range(start, min(start + self.batch_size, self.size)))
                     for start in range(0, self.size, self.batch_size)])  # fmt: skip

    def __len__(self) -> int:
        return -(-self.size // self.batch_size)
