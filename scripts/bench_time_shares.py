"""Benchmark: what the time shares (``vitals/time/*``) cost, as a paired A/B in one process.

    OMP_NUM_THREADS=1 python scripts/bench_time_shares.py                 # 10 pairs, 400 steps each
    OMP_NUM_THREADS=1 python scripts/bench_time_shares.py --pairs 5 --steps 300

The engine's ``fit`` trains the same model on the same data twice per pair, once with the time shares
(``StepTimes``, what every run has) and once without (``NoTimes``: windows pass through untouched and
nothing is timed), in alternating order so drifting machine load hits both alike; everything else is
as a run has it (TensorBoard logging at the default cadence, every 10 steps; no validation until the
end; no checkpoints). Prints the median wall time per step of each and the median of the paired
ratios (with, over without) with their range, of wall time and of this process's CPU time (which other
work on a shared machine disturbs less).
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from runner.data.loading import make_loaders
from runner.observe.writer import TensorBoardLogger
from runner.training.engine import Hooks, Loaders, LoopSettings, fit
from runner.training.precision import resolve_precision
from runner.training.step import Learner
from runner.training.time_shares import NoTimes, StepTimes

CPU = torch.device("cpu")


def one_run(with_shares: bool, steps: int, log_every: int, hidden: int, log_dir: Path) -> tuple[float, float]:
    """Wall and CPU seconds (this process's) per optimizer step of one fit."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
    model = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    small = TensorDataset(*data[:64])
    train, val, sampler = make_loaders(data, small, 32, shuffle=True, num_workers=0, seed=0, pin_memory=False)
    settings = LoopSettings(
        max_steps=steps, max_epochs=None, micro_batches_per_step=1, clip_norm=1.0,
        log_every_n_steps=log_every, val_every_n_epochs=None, val_every_n_steps=None, monitor="val/loss",
        monitor_mode="min", metrics={}, on_nonfinite="raise", max_nonfinite_in_a_row=5,
    )  # fmt: skip
    learner = Learner(model, nn.MSELoss(), optimizer, resolve_precision("fp32", CPU), CPU, False, "labels")
    logger = TensorBoardLogger(log_dir)
    times = StepTimes() if with_shares else NoTimes()
    started, cpu = time.perf_counter(), time.process_time()
    fit(learner, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0), Loaders(train, sampler, val),
        settings, Hooks(logger, times=times))  # fmt: skip
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    logger.close()
    return elapsed / steps, cpu / steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--log-every", type=int, default=10, help="trainer.log_every_n_steps (its default)")
    parser.add_argument("--hidden", type=int, default=32, help="the MLP's width (16-HIDDEN-1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        one_run(True, 50, args.log_every, args.hidden, Path(scratch) / "warm-up")
        with_shares, without, ratios, cpu_ratios = [], [], [], []
        for pair in range(args.pairs):
            order = (True, False) if pair % 2 == 0 else (False, True)
            seconds = {
                flag: one_run(flag, args.steps, args.log_every, args.hidden, Path(scratch) / f"{pair}-{flag}")
                for flag in order
            }
            with_shares.append(seconds[True][0])
            without.append(seconds[False][0])
            ratios.append(seconds[True][0] / seconds[False][0])
            cpu_ratios.append(seconds[True][1] / seconds[False][1])
    shape = f"16-{args.hidden}-1 MLP, batch 32, log every {args.log_every} steps"
    print(f"{args.pairs} pairs of {args.steps} steps, {shape}")
    print(f"with time shares:    {1000 * statistics.median(with_shares):.3f} ms/step (median)")
    print(f"without time shares: {1000 * statistics.median(without):.3f} ms/step (median)")
    for name, values in (("wall", ratios), ("CPU", cpu_ratios)):
        spread = f"[{min(values):.3f}-{max(values):.3f}]"
        print(f"with/without, paired, {name} time: median {statistics.median(values):.3f} {spread}")


if __name__ == "__main__":
    main()
