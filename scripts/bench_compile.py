"""Benchmark: regional against whole-model compile on ``model=char_transformer``: compile time and steady
step time, side by side, through runner's real CLI.

    OMP_NUM_THREADS=1 python scripts/bench_compile.py                    # 2 interleaved repeats
    OMP_NUM_THREADS=1 python scripts/bench_compile.py --repeats 1 --layers 8 --steps 30

Each run is a fresh process with its own empty Inductor cache (``TORCHINDUCTOR_CACHE_DIR``), so no
run reuses another's compiled code, and one compile thread; ``compile=true`` and
``compile_regional=true`` alternate. The numbers are runner's own (its end-of-run ``compile:`` line):
the compile time is what the first two compiled steps took beyond the steady compiled step, the steady
step the median compiled step after them, against the median of the eager steps 2-3 of the same run.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LINE = re.compile(
    r"compile: (?P<compile>[\d.]+) s compiling .*?steady step (?P<steady>[\d.]+) ms compiled .*?"
    r"against (?P<eager>[\d.]+) ms eager"
)
VARIANTS = {"whole": "compile=true", "regional": "compile_regional=true"}


def one_run(variant: str, layers: int, steps: int, scratch: Path) -> dict[str, float]:
    run_dir = scratch / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # fmt: skip
    command = [
        sys.executable, "-m", "runner", "train", "data=text", "model=char_transformer",
        f"model.layers={layers}", VARIANTS[variant], f"trainer.max_steps={steps}",
        f"trainer.log_every_n_steps={steps}", "trainer.val_every_n_epochs=null", "checkpoint=none",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=scratch, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    found = LINE.search(done.stderr + done.stdout)
    if found is None:
        raise RuntimeError(f"no compile line in the output of {' '.join(command)}")
    return {name: float(value) for name, value in found.groupdict().items()}


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4, help="model.layers (the shipped config's: 4)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--regional-first", action="store_true", help="start the alternation with it")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for repeat in range(args.repeats):
        order = list(VARIANTS) if (repeat + args.regional_first) % 2 == 0 else list(reversed(VARIANTS))
        for variant in order:
            with tempfile.TemporaryDirectory() as scratch:
                results[variant].append(one_run(variant, args.layers, args.steps, Path(scratch)))
                print(variant, results[variant][-1], flush=True)
    print(f"char_transformer, {args.layers} layers, {args.steps} steps, {args.repeats} repeats (medians):")
    print("| compile | compile s | steady ms/step | eager ms/step (same run) | steady/eager |")
    print("| --- | --- | --- | --- | --- |")
    for variant, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in ("compile", "steady", "eager")}
        ratio = statistics.median(run["steady"] / run["eager"] for run in runs)
        print(f"| {VARIANTS[variant]} | {median['compile']:.1f} | {median['steady']:.1f} | "
              f"{median['eager']:.1f} | {ratio:.2f} |")  # fmt: skip
    paired = [r["compile"] / w["compile"] for r, w in zip(results["regional"], results["whole"], strict=True)]
    steady = [r["steady"] / w["steady"] for r, w in zip(results["regional"], results["whole"], strict=True)]
    print(f"regional/whole, paired by repeat: compile time {statistics.median(paired):.2f} "
          f"[{min(paired):.2f}-{max(paired):.2f}], steady step {statistics.median(steady):.2f} "
          f"[{min(steady):.2f}-{max(steady):.2f}]")  # fmt: skip


if __name__ == "__main__":
    main()
