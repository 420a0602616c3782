"""Benchmark: what a dict batch costs runner's training step against an ``(inputs, targets)`` pair.

    python scripts/bench_batches.py                       # both workloads, 9 paired repeats
    python scripts/bench_batches.py --repeats 3 --workloads mlp

The same model, data and optimizer are fed to ``runner.training.step.train_step`` two ways: as
``(inputs, targets)`` pairs (``loss(model(inputs), targets)``) and as dicts ``{"inputs": ..., "labels": ...}``
(``model(**batch)``, targets from ``batch["labels"]``, the model wrapped to take those keywords, so the
wrapper's extra call is part of what the dict form costs). Each measurement starts from the same initial
weights and a fresh Adam, takes warm-up steps, then times a fixed number of steps on batches already in
memory (no data loading). The two forms run interleaved (pair, dict, pair, dict, ...) so drifting machine
load hits both alike; torch runs on one thread. The table gives the median steps/sec of each form over
the repeats and the median of the dict/pair ratios, paired repeat by repeat: once from all timed steps
(the throughput), once from each repeat's median step (1 / its time), which other processes' bursts on a
shared machine disturb far less.

Workloads: ``mlp``, runner's MLP (hidden [64]) on the 8x8 digits; ``char_rnn``, runner's GRU language
model (embedding 32, hidden 128) on 64-character windows of the bundled text. Batch size 32 for both.
"""

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from runner.data import load_digits, load_text
from runner.models import char_rnn, mlp
from runner.training.precision import resolve_precision
from runner.training.step import Learner, train_step

BATCH_SIZE = 32
WARMUP_STEPS = 20
CLIP_NORM = 1.0  # runner's default clip


class KeywordInputs(nn.Module):
    """The model as a dict batch calls it: ``model(inputs=..., labels=...)``; the labels are the loss's."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(inputs)


@dataclass(frozen=True)
class Workload:
    build_model: Callable[[], nn.Module]
    load: Callable[[], tuple[torch.Tensor, torch.Tensor]]  # every training input and target, stacked
    steps: int  # timed steps per measurement


def stacked(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = zip(*dataset, strict=True)
    return torch.stack(inputs), torch.stack(targets)


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    return stacked(load_digits()[0])


def text_windows() -> tuple[torch.Tensor, torch.Tensor]:
    return stacked(load_text(seq_len=64)[0])


WORKLOADS = {
    "mlp": Workload(lambda: mlp([1, 8, 8], 10, hidden=[64]), digits, steps=300),
    "char_rnn": Workload(lambda: char_rnn([64], len(load_text()[0].classes)), text_windows, steps=30),
}


def pair_batches(inputs: torch.Tensor, targets: torch.Tensor, count: int) -> list[tuple[torch.Tensor, ...]]:
    """``count`` batches in a fixed shuffled order, cycling through the data as epochs would."""
    order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(0))
    starts = itertools.cycle(range(0, len(inputs) - BATCH_SIZE + 1, BATCH_SIZE))
    chosen = [order[start : start + BATCH_SIZE] for start in itertools.islice(starts, count)]
    return [(inputs[index], targets[index]) for index in chosen]


def step_seconds(model: nn.Module, windows: list[list], target_key: str) -> list[float]:
    """Warm-up steps, then each of the rest timed on its own. ``target_key``: where a dict batch holds
    its targets (a pair ignores it)."""
    device = torch.device("cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    learner = Learner(model, nn.CrossEntropyLoss(), optimizer, resolve_precision("fp32", device), device,
                      False, target_key)  # fmt: skip
    for window in windows[:WARMUP_STEPS]:
        train_step(learner, window, CLIP_NORM)
    seconds = []
    for window in windows[WARMUP_STEPS:]:
        start = time.perf_counter()
        train_step(learner, window, CLIP_NORM)
        seconds.append(time.perf_counter() - start)
    return seconds


@dataclass
class Rates:
    """Per repeat: steps/sec over all timed steps, and 1 / the median step's time (what a step takes when
    nothing else on the machine interrupts it)."""

    overall: list[float] = field(default_factory=list)
    median_step: list[float] = field(default_factory=list)

    def add(self, seconds: list[float]) -> None:
        self.overall.append(len(seconds) / sum(seconds))
        self.median_step.append(1 / statistics.median(seconds))


def measure(name: str, repeats: int) -> tuple[Rates, Rates]:
    """The pair form's rates and the dict form's, measured alternately."""
    workload = WORKLOADS[name]
    pairs = pair_batches(*workload.load(), WARMUP_STEPS + workload.steps)
    dicts = [{"inputs": inputs, "labels": targets} for inputs, targets in pairs]
    torch.manual_seed(0)
    initial = workload.build_model().state_dict()

    def fresh_model() -> nn.Module:
        model = workload.build_model()
        model.load_state_dict(initial)
        return model

    pair, keyed = Rates(), Rates()
    for _ in range(repeats):
        pair.add(step_seconds(fresh_model(), [[batch] for batch in pairs], "labels"))
        keyed.add(step_seconds(KeywordInputs(fresh_model()), [[batch] for batch in dicts], "labels"))
    return pair, keyed


def row(label: str, pair: list[float], keyed: list[float]) -> str:
    ratios = [d / p for p, d in zip(pair, keyed, strict=True)]
    return (
        f"{label:<22} {statistics.median(pair):>13.1f} {statistics.median(keyed):>13.1f} "
        f"{statistics.median(ratios):>10.3f}  [{min(ratios):.3f}-{max(ratios):.3f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    arguments = parser.parse_args()
    torch.set_num_threads(1)

    print(f"torch {torch.__version__}, 1 thread, batch {BATCH_SIZE}, {arguments.repeats} paired repeats")
    header = ("workload (timed steps)", "pair steps/s", "dict steps/s", "dict/pair")
    print("{:<22} {:>13} {:>13} {:>10}  ratios min-max".format(*header))
    for name in arguments.workloads:
        pair, keyed = measure(name, arguments.repeats)
        print(row(f"{name} ({WORKLOADS[name].steps})", pair.overall, keyed.overall))
        print(row("  from median step", pair.median_step, keyed.median_step))


if __name__ == "__main__":
    main()
