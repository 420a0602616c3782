"""runner's loop against a raw AMP loop on a GPU: the same model, data, optimizer (AdamW), clip and
accumulation, fp16 autocast with loss scaling, on a small and a medium MLP. Each loop is timed from one
``torch.cuda.synchronize`` to another over its steps (none in between), and the host syncs each makes
per step are counted from CUDA's own profiler events (``cudaStreamSynchronize``, a blocking
``cudaMemcpy``, ...): the raw loop's are its loss scaler's, one a step; runner's should be the same on a
quiet step, plus one per log step.

    python scripts/bench_gpu.py                    # on a GPU: the table, and --json for the raw numbers
    python scripts/bench_gpu.py --dry-run          # on the CPU, tiny and fp32: that it all still runs

The runbook for the day a GPU is lent is in docs/performance.md ("On a GPU").
"""

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from runner.data.loading import make_loaders
from runner.training.engine import fit
from runner.training.epochs import Loaders
from runner.training.plan import LoopSettings
from runner.training.precision import resolve_precision
from runner.training.step import Learner

WORKLOADS = {"small": (256, [1024, 1024], 256), "medium": (1024, [4096] * 4, 512)}  # features, hidden, batch
DRY = {"small": (16, [32], 8), "medium": (32, [64, 64], 8)}
# The CUDA runtime calls after which the host has waited for the device.
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
CLIP, LR, OUTPUTS = 1.0, 1e-3, 10


def parts(workload: tuple, samples: int, device: torch.device) -> tuple[nn.Module, TensorDataset]:
    features, hidden, _ = workload
    torch.manual_seed(0)
    widths = [features, *hidden]
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(widths[-1], OUTPUTS)).to(device)
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(
        torch.randn(samples, features, generator=generator),
        torch.randint(0, OUTPUTS, (samples,), generator=generator),
    )
    return model, data


def runner_loop(
    workload: tuple, device: torch.device, precision: str, accumulate: int, steps: int
) -> Callable:
    """``fit`` as ``train`` runs it, less the files: logging every 50 steps, no validation until the end."""
    model, data = parts(workload, workload[2] * accumulate * steps, device)
    train, val, sampler = make_loaders(
        data, TensorDataset(*data[:8]), workload[2], True, 0, 0, device.type == "cuda"
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    learner = Learner(
        model, nn.CrossEntropyLoss(), optimizer, resolve_precision(precision, device), device, False, "labels"
    )
    settings = LoopSettings(
        max_steps=steps,
        max_epochs=None,
        micro_batches_per_step=accumulate,
        clip_norm=CLIP,
        log_every_n_steps=50,
        val_every_n_epochs=None,
        val_every_n_steps=None,
        monitor="val/loss",
        monitor_mode="min",
        metrics={},
        on_nonfinite="raise",
        max_nonfinite_in_a_row=5,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return lambda: fit(learner, scheduler, Loaders(train, sampler, val), settings)


def raw_loop(workload: tuple, device: torch.device, precision: str, accumulate: int, steps: int) -> Callable:
    """The hand-written AMP loop: autocast, scaled backward per micro-batch, unscale, clip, step, update."""
    model, data = parts(workload, workload[2] * accumulate * steps, device)
    train, _, _ = make_loaders(data, TensorDataset(*data[:8]), workload[2], True, 0, 0, device.type == "cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    amp = precision == "amp" and device.type == "cuda"
    scaler = torch.amp.GradScaler(device.type, enabled=amp)
    loss_fn = nn.CrossEntropyLoss()

    def run() -> None:
        batches = iter(train)
        for _ in range(steps):
            for _ in range(accumulate):
                inputs, targets = (t.to(device, non_blocking=True) for t in next(batches))
                with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
                    loss = loss_fn(model(inputs), targets) / accumulate
                scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

    return run


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable, device: torch.device) -> float:
    synchronize(device)
    started = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - started


def syncs(run: Callable, device: torch.device) -> int:
    """The host's waits for the device during ``run``, as CUDA's profiler records them."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        run()
    return sum(1 for event in profile.events() if event.name in SYNCS)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="tiny models, few steps, on the CPU if no GPU")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.dry_run:
        parser.error("no CUDA device here: --dry-run runs it on the CPU")
    workloads = DRY if args.dry_run else WORKLOADS
    steps, repeats = (4, 1) if args.dry_run else (args.steps, args.repeats)
    precision = "amp" if device.type == "cuda" else "fp32"
    results = []
    print(
        f"{device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'dry run'}), "
        f"{precision}, {steps} steps, median of {repeats}"
    )
    print(
        f"{'workload':8s} {'accum':>5s} {'raw ms/step':>12s} {'runner ms/step':>15s} {'ratio':>6s} "
        f"{'raw syncs/step':>15s} {'runner syncs/step':>18s}"
    )
    for name, workload in workloads.items():
        for accumulate in (1, 4):
            row = {"workload": name, "accumulate": accumulate}
            for contender, build in (("raw", raw_loop), ("runner", runner_loop)):
                if not args.dry_run:  # warm-up: kernels, the allocator's pools
                    build(workload, device, precision, accumulate, steps)()
                seconds = [
                    timed(build(workload, device, precision, accumulate, steps), device)
                    for _ in range(repeats)
                ]
                row[f"{contender}_ms_per_step"] = 1000 * statistics.median(seconds) / steps
                row[f"{contender}_syncs_per_step"] = (
                    syncs(build(workload, device, precision, accumulate, steps), device) / steps
                )
            results.append(row)
            raw, ours = row["raw_ms_per_step"], row["runner_ms_per_step"]
            print(
                f"{name:8s} {accumulate:5d} {raw:12.3f} {ours:15.3f} {ours / raw:6.2f} "
                f"{row['raw_syncs_per_step']:15.2f} {row['runner_syncs_per_step']:18.2f}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
