"""Benchmark: runner's engine against a plain hand-written training loop
(zero_grad, forward, loss, backward, clip, step) doing the same work.

    python scripts/bench.py                      # every workload, 5 paired repeats
    python scripts/bench.py --repeats 3 --workloads tiny

Each measurement is a fresh process (runner through its real CLI, the raw loop as a script), the two
interleaved (runner, raw, runner, raw, ...) so drifting machine load hits both alike; torch runs on one
thread. Per-step times come from the wall-clock stamps of the ``train/loss`` TensorBoard events both
write every step, after a warm-up; start-up is from launching the process to the first logged step;
peak RSS is the child's own (``wait4``). The table gives median [min-max] over repeats and the runner/raw
ratio paired repeat by repeat. If PyTorch Lightning is installed, the same loop written for it
(``lightning_loop.py``) is a third contender; it is never a dependency.
"""

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKLOADS = {
    # name: (input features, hidden widths, outputs, task)
    "tiny": (16, [32], 1, "regression"),
    "medium": (512, [1024, 1024], 10, "classification"),
}


def runner_command(workload: str, accumulate: int, steps: int, run_dir: Path) -> list[str]:
    features, hidden, outputs, task = WORKLOADS[workload]
    data = (
        ["data=regression", f"data.dataset.num_features={features}", "data.dataset.learnable=true"]
        if task == "regression"
        else [
            "data=classification",
            f"data.dataset.num_features={features}",
            f"data.dataset.num_classes={outputs}",
        ]
    )
    return [
        sys.executable, "-m", "runner", "train", *data, "data.dataset.num_train=4096",
        "data.dataset.num_val=64", f"model.hidden=[{','.join(map(str, hidden))}]", "optimizer=adam",
        "clip=1.0", f"accumulate={accumulate}", "data.batch_size=32", f"trainer.max_steps={steps}",
        "trainer.max_epochs=null", "trainer.log_every_n_steps=1", "trainer.val_every_n_epochs=null",
        "checkpoint=none", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip


def script_command(script: str, workload: str, accumulate: int, steps: int, run_dir: Path) -> list[str]:
    features, hidden, outputs, task = WORKLOADS[workload]
    return [
        sys.executable, str(Path(__file__).with_name(script)), str(run_dir), str(features),
        ",".join(map(str, hidden)), str(outputs), task, str(accumulate), str(steps),
    ]  # fmt: skip


def raw_command(workload: str, accumulate: int, steps: int, run_dir: Path) -> list[str]:
    return script_command("raw_loop.py", workload, accumulate, steps, run_dir)


def lightning_command(workload: str, accumulate: int, steps: int, run_dir: Path) -> list[str]:
    return script_command("lightning_loop.py", workload, accumulate, steps, run_dir)


def step_times(run_dir: Path) -> tuple[list[float], float]:
    """Seconds between consecutive optimizer steps' loss events, and the first event's wall time."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    events = accumulator.Scalars("train/loss")
    return [b.wall_time - a.wall_time for a, b in itertools.pairwise(events)], events[0].wall_time


def measure(command: list[str], run_dir: Path, warmup: int) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    started = time.time()
    process = subprocess.Popen(command, env=env, cwd=run_dir.parent, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)  # fmt: skip
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{process.stderr.read().decode()}")
    deltas, first_step = step_times(run_dir)
    return {
        "ms_per_step": 1000 * statistics.median(deltas[warmup:]),
        "startup_s": first_step - started,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def spread(values: list[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}g} [{min(values):.{digits}g}-{max(values):.{digits}g}]"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default="tiny,medium")
    parser.add_argument("--accumulate", default="1,4")
    parser.add_argument("--warmup", type=int, default=50, help="logged steps skipped before timing")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    parser.add_argument("--without-lightning", action="store_true", help="even where it is installed")
    args = parser.parse_args()
    steps_for = {"tiny": 1500, "medium": 300}

    contenders = {"runner": runner_command, "raw": raw_command}
    lightning_installed = importlib.util.find_spec("lightning") is not None  # optional, never a dependency
    if lightning_installed and not args.without_lightning:
        contenders["lightning"] = lightning_command
    rows, measurements = [], []
    for workload in args.workloads.split(","):
        for accumulate in map(int, args.accumulate.split(",")):
            results = {name: [] for name in contenders}
            for _ in range(args.repeats):
                for name, command in contenders.items():
                    with tempfile.TemporaryDirectory() as scratch:
                        run_dir = Path(scratch) / "run"
                        steps = steps_for.get(workload, 300)
                        results[name].append(
                            measure(command(workload, accumulate, steps, run_dir), run_dir, args.warmup)
                        )
            ratios = [
                r["ms_per_step"] / w["ms_per_step"]
                for r, w in zip(results["runner"], results["raw"], strict=True)
            ]
            startup_gap = [
                r["startup_s"] - w["startup_s"]
                for r, w in zip(results["runner"], results["raw"], strict=True)
            ]
            rss_gap = [
                r["peak_rss_mib"] - w["peak_rss_mib"]
                for r, w in zip(results["runner"], results["raw"], strict=True)
            ]
            row = [
                f"{workload} accumulate={accumulate}",
                spread([r["ms_per_step"] for r in results["runner"]]),
                spread([r["ms_per_step"] for r in results["raw"]]),
                spread(ratios),
                " / ".join(spread([r["startup_s"] for r in results[name]]) for name in contenders),
                spread(startup_gap, 2),
                " / ".join(f"{statistics.median([r['peak_rss_mib'] for r in results[name]]):.0f}"
                           for name in contenders),
                spread(rss_gap, 2),
            ]  # fmt: skip
            if "lightning" in results:
                row[4:4] = [
                    spread([r["ms_per_step"] for r in results["lightning"]]),
                    spread([
                        lit["ms_per_step"] / w["ms_per_step"]
                        for lit, w in zip(results["lightning"], results["raw"], strict=True)
                    ]),
                ]  # fmt: skip
            rows.append(row)
            measurements.append({"workload": workload, "accumulate": accumulate, **results})
    names = " / ".join(contenders)
    header = ["workload", "runner ms/step", "raw ms/step", "runner/raw", f"start-up s ({names})",
              "start-up gap s (runner - raw)", f"peak RSS MiB ({names})",
              "RSS gap MiB (runner - raw)"]  # fmt: skip
    if "lightning" in contenders:
        header[4:4] = ["lightning ms/step", "lightning/raw"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        args.json.write_text(json.dumps(measurements, indent=2))


if __name__ == "__main__":
    main()
