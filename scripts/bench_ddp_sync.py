"""Benchmark: what surviving out of memory with several processes costs per step.

    python scripts/bench_ddp_sync.py                     # 5 paired repeats, 2 processes, the medium MLP
    python scripts/bench_ddp_sync.py --repeats 3 --accumulate 4 --hidden 2048,2048

With ``on_oom=split`` (opt-in with several processes) runner averages the gradients after each
window's backward, so that a process that runs out of memory can tell the others (``training/
memory_agreement.py``); ``on_oom=raise`` (what the default ``auto`` is there) keeps DDP, whose gradient
reduction overlaps the last backward.
Each repeat runs both under real torchrun, interleaved (split, raise, split, raise, ...), and the table
gives the median step time after a warm-up and the split/raise ratio paired repeat by repeat. On this
project's CPU machines the processes share a few cores; on GPUs the overlap DDP gains is larger.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import step_times

REPO = Path(__file__).resolve().parents[1]


def command(on_oom: str, options: argparse.Namespace, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={options.processes}", "-m", "runner", "train", "data=classification",
        "data.dataset.num_features=512",
        "data.dataset.num_train=8192", "data.dataset.num_val=64", f"model.hidden=[{options.hidden}]",
        "optimizer=adam", f"accumulate={options.accumulate}", "data.batch_size=32",
        f"trainer.max_steps={options.steps}",
        "trainer.max_epochs=null", "trainer.log_every_n_steps=1", "trainer.val_every_n_epochs=null",
        "checkpoint=none", f"on_oom={on_oom}", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--hidden", default="1024,1024")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    options = parser.parse_args()
    medians: dict[str, list[float]] = {"split": [], "raise": []}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(options.repeats):
            for on_oom in medians:
                run_dir = Path(folder) / f"{on_oom}{repeat}"
                ran = subprocess.run(
                    command(on_oom, options, run_dir), cwd=folder, capture_output=True, text=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"},
                )  # fmt: skip
                if ran.returncode != 0:
                    sys.exit(f"on_oom={on_oom}, repeat {repeat}: exit {ran.returncode}\n{ran.stderr[-4000:]}")
                times, _ = step_times(run_dir)
                medians[on_oom].append(statistics.median(times[options.warmup :]) * 1000)
    ratios = [split / raised for split, raised in zip(medians["split"], medians["raise"], strict=True)]
    print(f"{options.processes} processes, hidden [{options.hidden}], accumulate {options.accumulate}, "
          f"{options.repeats} paired repeats (median ms per step [min-max])")  # fmt: skip
    for on_oom, values in medians.items():
        print(f"  on_oom={on_oom:<6} {statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]")
    print(f"  split/raise ratio: median {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}-{max(ratios):.3f}]")  # fmt: skip


if __name__ == "__main__":
    main()
