"""Samples per second of runner's training loader against a plain ``torch.utils.data.DataLoader`` with
the same workers, on a decode-like data set (about 0.5 ms of CPU a sample: zlib decompression, then a
random crop and flip drawn from torch's generator) and on a trivial one (a tensor row); the cost of
per-sample seeds (``data.sample_seeds``) per sample; and a stream with ``state_dict()`` read by workers
through torchdata's ``StatefulDataLoader`` against torch's loader.

    OMP_NUM_THREADS=1 python scripts/bench_loading.py [--workers 2] [--repeats 7]

Each repeat reads one epoch with each loader, interleaved (runner's, torch's, torch's, runner's, ...), after
a warm-up epoch that starts the workers; the medians and their ratio are printed."""

import argparse
import statistics
import time
import zlib

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info

from runner.data.loading import epoch_batches, make_loaders
from runner.data.sample_seeds import HostStates, sample_seed, start_generators
from runner.data.stream_state import stateful_loader


class DecodeLike(Dataset):
    """Each sample a compressed image, decompressed (about 0.5 ms), cropped and flipped at random."""

    def __init__(self, size: int, side: int) -> None:
        generator = torch.Generator().manual_seed(0)
        image = torch.randint(0, 16, (3, side, side), dtype=torch.uint8, generator=generator)
        self.blob = zlib.compress(image.numpy().tobytes(), level=1)
        self.side, self.size = side, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        raw = zlib.decompress(self.blob)
        image = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(3, self.side, self.side)
        top, left = torch.randint(0, 8, (2,)).tolist()
        crop = image[:, top : top + self.side - 8, left : left + self.side - 8]
        if torch.rand(()) < 0.5:
            crop = crop.flip(-1)
        return crop.float().div_(255), index % 10


class Rows(Dataset):
    """A trivial data set: a row of a tensor (a data set of one's own: runner seeds each sample; a plain
    ``TensorDataset`` it reads as torch does, having nothing to seed)."""

    def __init__(self, rows: torch.Tensor, labels: torch.Tensor) -> None:
        self.rows, self.labels = rows, labels

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int):
        return self.rows[index], self.labels[index]


class CountedStream(IterableDataset):
    """A stream of tensor rows each worker reads its share of, keeping its position."""

    def __init__(self, rows: torch.Tensor) -> None:
        self.rows, self.position = rows, 0

    def __iter__(self):
        info = get_worker_info()
        share = range(info.id, len(self.rows), info.num_workers) if info else range(len(self.rows))
        while self.position < len(share):
            self.position += 1
            yield self.rows[share[self.position - 1]]
        self.position = 0

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def side_for(seconds: float) -> int:
    """The image side whose decompression takes about ``seconds``."""
    for side in range(64, 2048, 16):
        data = DecodeLike(1, side)
        start = time.perf_counter()
        for _ in range(50):
            zlib.decompress(data.blob)
        if (time.perf_counter() - start) / 50 >= seconds:
            return side
    return 2048


def one_epoch(read) -> float:
    """Seconds to read one epoch's batches."""
    start = time.perf_counter()
    for _ in read():
        pass
    return time.perf_counter() - start


def compare(name: str, dataset: Dataset, workers: int, batch_size: int, repeats: int) -> None:
    runners, _, sampler = make_loaders(
        dataset, dataset, batch_size, shuffle=True, num_workers=workers, seed=0, pin_memory=False,
        sample_seeds=True,
    )  # fmt: skip
    torchs = DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=workers, persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    epoch = iter(range(10**6))
    reads = {
        "runner": lambda: epoch_batches(runners, sampler, next(epoch), 0),
        "torch": lambda: iter(torchs),
    }
    times: dict[str, list[float]] = {key: [] for key in reads}
    for key in reads:  # warm-up: workers started, caches filled
        one_epoch(reads[key])
    for repeat in range(repeats):
        for key in reads if repeat % 2 == 0 else reversed(list(reads)):
            times[key].append(one_epoch(reads[key]))
    rate = {key: len(dataset) / statistics.median(values) for key, values in times.items()}
    print(f"{name:<30} workers {workers}: runner {rate['runner']:>9,.0f}/s, torch {rate['torch']:>9,.0f}/s, "
          f"runner/torch {rate['runner'] / rate['torch']:.3f}")  # fmt: skip


def seed_cost(samples: int = 20000) -> None:
    start = time.perf_counter()
    for index in range(samples):
        start_generators(sample_seed(0, 1, index))
    per_sample = (time.perf_counter() - start) / samples
    start = time.perf_counter()
    for _ in range(samples // 10):
        HostStates.now().restore()
    per_batch = (time.perf_counter() - start) / (samples // 10)
    print(f"per-sample seeds: {per_sample * 1e6:.1f} us a sample; in the main process (data.num_workers=0) "
          f"the run's states kept and put back, {per_batch * 1e6:.1f} us a batch")  # fmt: skip


def compare_stream(workers: int, batch_size: int, repeats: int, size: int = 20000) -> None:
    rows = torch.randn(size, 16)
    loaders = {
        "torchdata": lambda: stateful_loader(CountedStream(rows), batch_size=batch_size, num_workers=workers),
        "torch": lambda: DataLoader(CountedStream(rows), batch_size=batch_size, num_workers=workers),
    }
    times: dict[str, list[float]] = {key: [] for key in loaders}
    for repeat in range(repeats):
        for key in loaders if repeat % 2 == 0 else reversed(list(loaders)):
            loader = loaders[key]()
            times[key].append(one_epoch(lambda loader=loader: iter(loader)))
    rate = {key: size / statistics.median(values) for key, values in times.items()}
    ratio = rate["torchdata"] / rate["torch"]
    print(f"{'stream with state_dict()':<30} workers {workers}: StatefulDataLoader "
          f"{rate['torchdata']:>9,.0f}/s, torch {rate['torch']:>9,.0f}/s, ratio {ratio:.3f} (workers started "
          "each pass, as a stream's are)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=32)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    side = side_for(0.0005)
    print(f"decode-like: {side}x{side} images, about 0.5 ms to decompress each")
    compare("decode-like (~0.5 ms/sample)", DecodeLike(1024, side), arguments.workers, arguments.batch_size,
            arguments.repeats)  # fmt: skip
    rows, labels = torch.randn(20000, 16), torch.randint(0, 10, (20000,))
    batch_size, repeats = arguments.batch_size, arguments.repeats
    for workers in (arguments.workers, 0):
        compare("trivial (a tensor row)", Rows(rows, labels), workers, batch_size, repeats)
    compare("TensorDataset (nothing seeded)", TensorDataset(rows, labels), 0, batch_size, repeats)
    seed_cost()
    compare_stream(arguments.workers, arguments.batch_size, arguments.repeats)


if __name__ == "__main__":
    main()
