"""Paired start-up of two versions of runner: this checkout's and another's (a worktree of an older
commit), each a one-step run in a fresh process, interleaved so drifting machine load hits both alike.

    git worktree add /tmp/old 82cdb79
    python scripts/startup_ab.py /tmp/old --pairs 12

Each version runs once first, unmeasured, with Python's bytecode cache on (as a user's installed runner
starts from cached ``.pyc`` files). Prints each version's median wall time and the paired difference
(this minus other) and ratio.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_against import environment

REPO = Path(__file__).resolve().parents[1]
ARGUMENTS = ("train", "data=regression", "data.dataset.num_features=16", "model.hidden=[32]",
             "data.dataset.learnable=true", "trainer.max_steps=1", "checkpoint=none")  # fmt: skip


def wall_seconds(source: Path) -> float:
    """``python -m runner train ...`` with ``source`` first on the path, from start to exit."""
    with tempfile.TemporaryDirectory() as scratch:
        env = environment(source)
        command = [sys.executable, "-m", "runner", *ARGUMENTS, f"hydra.run.dir={scratch}/run"]
        started = time.perf_counter()
        result = subprocess.run(command, env=env, cwd=scratch, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("other", type=Path, help="the other checkout (its src/ is put first on the path)")
    parser.add_argument("--pairs", type=int, default=12)
    args = parser.parse_args()
    sources = {"this": REPO / "src", "other": args.other.resolve() / "src"}
    times: dict[str, list[float]] = {"this": [], "other": []}
    for source in sources.values():  # writes the bytecode cache: each measured start reads it
        wall_seconds(source)
    for pair in range(args.pairs):
        order = ["this", "other"] if pair % 2 == 0 else ["other", "this"]
        for name in order:
            times[name].append(wall_seconds(sources[name]))
    for name, values in times.items():
        print(f"{name:5} median {statistics.median(values):.3f} s [{min(values):.2f}-{max(values):.2f}]")
    differences = [a - b for a, b in zip(times["this"], times["other"], strict=True)]
    ratios = [a / b for a, b in zip(times["this"], times["other"], strict=True)]
    print(
        f"this - other: median {statistics.median(differences):+.3f} s "
        f"[{min(differences):+.2f}..{max(differences):+.2f}]; ratio median {statistics.median(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
