"""Slot occupancy of an Optuna search with K parallel slots: this tree against another revision (by
default ``main``, the batch loop), side by side on one machine.

    python scripts/bench_sweep_slots.py                  # this tree and main, K=2, one pair
    python scripts/bench_sweep_slots.py --rev HEAD~3 --pairs 2

The search: the grid sampler over 8 trials whose lengths differ tenfold (``trainer.max_steps`` 10 or
100, four seeds each), its steps slowed by a data set that sleeps per item (``tests/plugins``), so the
machine's other load moves little; jobs run in the joblib launcher's 2 worker processes with
``hydra.sweeper.n_jobs=K``. Each contender is a fresh ``python -m runner`` process: this tree's
``src/``, or a ``git worktree`` of REV in a temporary folder, first on ``PYTHONPATH``.

A trial's busy time runs from its job's start in a worker (Hydra writes the job's ``.hydra/config.yaml``
first) to its end (``result.json``, runner's last write), by the files' modification times; the
trials' span from the first job's start to the last job's end. Occupancy is the trials' busy time over
K x that span (1.0: no slot ever idle; what is left is the slots' waits for a batch's slowest trial,
and the dispatch from one trial's end to the next one's start); the sweep's wall time is the whole
command's (Hydra's start-up and the summary included, alike for both). Optuna's own trial times would
not do: the batch loop tells the study how a trial ended only once its whole batch has.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEARCH = (
    "train", "-m", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid", "hydra.sweeper.sampler.seed=0",
    "trainer.max_steps=choice(10,100)", "seed=choice(0,1,2,3)", "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2", "data.dataset._target_=slow_data.slow_classification",
    "+data.dataset.seconds_per_item=0.01", "data=classification", "data.dataset.num_train=640",
    "data.dataset.num_val=32", "data.batch_size=16", "trainer.val_every_n_steps=null", "checkpoint=none",
)  # fmt: skip


def busy_spans(sweep_dir: Path) -> list[tuple[float, float]]:
    """Each trial's job's start and end in its worker."""
    return [
        ((job / ".hydra" / "config.yaml").stat().st_mtime, (job / "result.json").stat().st_mtime)
        for job in sorted(sweep_dir.glob("0*"))
    ]


def measure(src: Path, slots: int, place: Path) -> dict[str, float]:
    environment = {**os.environ, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join([str(src), str(REPO / "tests" / "plugins")])}  # fmt: skip
    sweep_dir = place / "sweep"
    started = time.perf_counter()
    command = [
        sys.executable,
        "-m",
        "runner",
        *SEARCH,
        f"hydra.sweeper.n_jobs={slots}",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    result = subprocess.run(command, cwd=place, env=environment, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"the search under {src} failed:\n{result.stderr[-3000:]}")
    spans = busy_spans(sweep_dir)
    span = max(end for _, end in spans) - min(start for start, _ in spans)
    busy = sum(end - start for start, end in spans)
    return {"trials": len(spans), "occupancy": busy / (slots * span), "span": span, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rev", default="main", help="the revision to compare with (default: main)")
    parser.add_argument("--slots", type=int, default=2, help="K, hydra.sweeper.n_jobs (default: 2)")
    parser.add_argument("--pairs", type=int, default=1, help="runs of each, interleaved (default: 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-slots-") as folder:
        worktree = Path(folder) / "rev"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree), args.rev],
                       check=True)  # fmt: skip
        try:
            contenders = {"this tree": REPO / "src", args.rev: worktree / "src"}
            for pair in range(args.pairs):
                order = list(contenders.items()) if pair % 2 == 0 else list(contenders.items())[::-1]
                for name, src in order:
                    place = Path(folder) / f"{pair}-{name.replace(' ', '_').replace('/', '_')}"
                    place.mkdir()
                    figures = measure(src, args.slots, place)
                    print(
                        f"{name:>12}: K={args.slots}, {figures['trials']} trials, occupancy "
                        f"{figures['occupancy']:.3f}, trials' span {figures['span']:.1f} s, sweep wall "
                        f"{figures['wall']:.1f} s",
                        flush=True,
                    )
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False
            )


if __name__ == "__main__":
    main()
