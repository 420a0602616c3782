"""Paired benchmark of this tree against another revision of runner and against a hand-written loop
that logs nothing (the floor), on the tiny workload at runner's default log cadence.

    python scripts/bench_against.py 0f1facd                 # 5 pairs at 300 and 2300 steps
    python scripts/bench_against.py HEAD~3 --pairs 7 --steps 300,2300
    python scripts/bench_against.py 0f1facd --instructions  # instructions counted, not time

Each measurement is a fresh process at one torch thread: runner through its real command line (this
tree's ``src/``, or a ``git worktree`` of REV made in a temporary folder, first on ``PYTHONPATH``), and
``raw_loop.py`` (the same math: clip 1.0, Adam) with no logging. The three run interleaved (the order
rotates each pair) so drifting machine load hits all alike. A process's CPU time (user + system, from
``wait4``) at the long length minus the same contender's at the short length, over the steps between,
is its CPU time per step with start-up taken out; start-up is the short run's wall time. Ratios are
paired pair by pair and given as median [min-max]. Each contender runs once first, unmeasured, with
Python's bytecode cache on (``environment``): start-up is then a user's second run, not the compiler's.

``--instructions`` counts instead of timing: each process runs once under valgrind's callgrind, which
counts the instructions it executes, the same count (to about 0.001%) whatever else the machine is doing.
On a machine whose load moves CPU times by 2x between runs it is the measurement that still compares; it
counts work, not time (a cache miss or a wait costs nothing in it). Slow: several minutes a process, two
processes at a time. Needs ``valgrind`` (Debian's package).
"""

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The tiny workload: a 16-32-1 MLP on learnable regression, batch 32, Adam; checkpoints and validation
# off (the hand loop does neither), everything else at runner's defaults (logging every 10 steps).
RUNNER = ("train", "data=regression", "data.dataset.num_features=16", "data.dataset.learnable=true",
          "data.dataset.num_train=4096", "data.dataset.num_val=64", "model.hidden=[32]", "optimizer=adam",
          "trainer.max_epochs=null", "trainer.val_every_n_epochs=null", "checkpoint=none")  # fmt: skip


def runner_command(steps: int, scratch: Path) -> list[str]:
    return [sys.executable, "-m", "runner", *RUNNER, f"trainer.max_steps={steps}",
            f"hydra.run.dir={scratch / 'run'}"]  # fmt: skip


def floor_command(steps: int, scratch: Path) -> list[str]:
    """The hand loop with runner's default clip (1.0) and no logging: the same math, nothing else."""
    loop = Path(__file__).with_name("raw_loop.py")
    return [sys.executable, str(loop), str(scratch / "run"), "16", "32", "1", "regression", "1", str(steps),
            "--no-log"]  # fmt: skip


def environment(source: Path) -> dict[str, str]:
    """One torch thread, ``source`` first on the path, and Python's bytecode cache on: as a user's
    installed runner starts from its cached ``.pyc`` files after its first run, not by compiling its
    source each time (where ``PYTHONDONTWRITEBYTECODE`` is set, start-up would measure the compiler)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(source)}


def warm_up(contenders: dict, steps: int) -> None:
    """One run of each contender, not measured: it writes the bytecode cache the measured runs read."""
    for build, source in contenders.values():
        with tempfile.TemporaryDirectory() as scratch:
            measure(build(steps, Path(scratch)), source, Path(scratch))


def measure(command: list[str], source: Path, scratch: Path) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one process, ``source`` first on its path."""
    env = environment(source)
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{process.stderr.read().decode()}")
    process.stderr.close()
    return usage.ru_utime + usage.ru_stime, wall


def count(command: list[str], source: Path, scratch: Path) -> int:
    """Instructions one process executes under callgrind, ``source`` first on its path (its hash seed fixed,
    so that dict and set orders, and so the count, repeat)."""
    env = {**environment(source), "PYTHONHASHSEED": "0"}
    out = scratch / "callgrind.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    done = subprocess.run([*valgrind, *command], env=env, cwd=scratch, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    totals = [line for line in out.read_text().splitlines() if line.startswith(("totals:", "summary:"))]
    return int(totals[0].split()[1])


def count_all(jobs: dict[Any, tuple[Callable[[Path], list[str]], Path]]) -> dict[Any, int]:
    """Each job's instructions (``count``): by name, its command (made for a scratch folder) and source,
    as many at a time as there are CPUs (valgrind's counts do not change with the load)."""

    def one(name: Any) -> int:
        build, source = jobs[name]
        with tempfile.TemporaryDirectory() as scratch:
            return count(build(Path(scratch)), source, Path(scratch))

    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        return dict(zip(jobs, pool.map(one, jobs), strict=True))


def counted(contenders: dict, short: int, long: int) -> None:
    """Each contender once at each length under callgrind: instructions per step and at start-up."""
    jobs = {f"{name}@{steps}": (functools.partial(build, steps), source)
            for name, (build, source) in contenders.items() for steps in (short, long)}  # fmt: skip
    totals = count_all(jobs)
    per_step = {name: (totals[f"{name}@{long}"] - totals[f"{name}@{short}"]) / (long - short)
                for name in contenders}  # fmt: skip
    startup = {name: totals[f"{name}@{short}"] - short * per_step[name] for name in contenders}
    print("| | instructions per step | start-up instructions |")
    print("| --- | --- | --- |")
    for name in contenders:
        print(f"| {name} | {per_step[name] / 1e6:.4f} M | {startup[name] / 1e9:.4f} G |")
    for other in list(contenders)[1:]:
        ratio, start = per_step["this"] / per_step[other], startup["this"] / startup[other]
        print(f"| this / {other} | {ratio:.4f} | {start:.4f} |")


def spread(values: list[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}g} [{min(values):.{digits}g}-{max(values):.{digits}g}]"


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("rev", help="the revision to compare with (a commit, tag or branch)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", default="300,2300", help="the short and the long length")
    counts = "count instructions under callgrind, once each, instead of timing pairs"
    parser.add_argument("--instructions", action="store_true", help=counts)
    args = parser.parse_args()
    short, long = map(int, args.steps.split(","))
    with tempfile.TemporaryDirectory() as folder:
        worktree = Path(folder) / "rev"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree), args.rev],
                       check=True)  # fmt: skip
        try:
            contenders = {
                "this": (runner_command, REPO / "src"),
                args.rev: (runner_command, worktree / "src"),
                "floor": (floor_command, REPO / "src"),
            }
            warm_up(contenders, short)
            if args.instructions:
                counted(contenders, short, long)
                return
            per_step: dict[str, list[float]] = {name: [] for name in contenders}
            startup: dict[str, list[float]] = {name: [] for name in contenders}
            names = list(contenders)
            for pair in range(args.pairs):
                order = names[pair % len(names) :] + names[: pair % len(names)]
                cpu: dict[str, dict[int, float]] = {name: {} for name in names}
                for steps in (short, long):
                    for name in order:
                        build, source = contenders[name]
                        with tempfile.TemporaryDirectory() as scratch:
                            seconds, wall = measure(build(steps, Path(scratch)), source, Path(scratch))
                        cpu[name][steps] = seconds
                        if steps == short:
                            startup[name].append(wall)
                for name in names:
                    per_step[name].append(1000 * (cpu[name][long] - cpu[name][short]) / (long - short))
                line = ", ".join(f"{name} {per_step[name][-1]:.3f} ms" for name in names)
                print(f"pair {pair + 1}: CPU per step {line}", flush=True)
        finally:
            remove = ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)]
            subprocess.run(remove, check=False)
    print()
    print("| | CPU ms/step | start-up s (wall, short run) |")
    print("| --- | --- | --- |")
    for name in names:
        print(f"| {name} | {spread(per_step[name])} | {spread(startup[name])} |")
    for other in names[1:]:
        ratio = [a / b for a, b in zip(per_step["this"], per_step[other], strict=True)]
        start = [a / b for a, b in zip(startup["this"], startup[other], strict=True)]
        print(f"| this / {other} | {spread(ratio)} | {spread(start)} |")


if __name__ == "__main__":
    main()
