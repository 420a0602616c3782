"""What each per-step feature that is on by default costs: runner as it is against runner with that one
feature off, paired, on the tiny workload of ``bench_against.py`` at runner's default log cadence.

    python scripts/bench_features.py                # 5 pairs at 300 and 2300 steps
    python scripts/bench_features.py --pairs 7 --steps 300,4300

Each contender is a fresh process of this tree at one torch thread; the default and each feature-off
variant run interleaved, the order rotating each pair, so drifting load hits all alike. CPU time per
step is a process's CPU time at the long length minus its CPU time at the short one, over the steps
between (start-up taken out). A feature's cost is the default's per-step time minus the variant's,
paired pair by pair, in microseconds, with the default/variant ratio: median [min-max]. A cost whose
range spans zero is within the noise of the measurement.

``--instructions`` counts each variant's instructions once under valgrind's callgrind instead (as
``bench_against.py --instructions``): a feature's cost is then the instructions it adds per step,
the same between runs whatever the machine's load.
"""

import argparse
import functools
import statistics
import tempfile
from pathlib import Path

from bench_against import REPO, count_all, measure, runner_command, spread, warm_up

# Each feature on by default, and the override that turns it off.
FEATURES = {
    "out of memory survived (on_oom=auto)": "on_oom=raise",
    "non-finite guard (on_nonfinite=raise)": "on_nonfinite=off",
    "logging every 10 steps (scalars, grad norms, progress)": "trainer.log_every_n_steps=1000000",
}


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", default="300,2300", help="the short and the long length")
    counts = "count instructions under callgrind, once each, instead of timing pairs"
    parser.add_argument("--instructions", action="store_true", help=counts)
    args = parser.parse_args()
    short, long = map(int, args.steps.split(","))
    variants = {"default": None, **FEATURES}
    names = list(variants)
    warm_up({"default": (runner_command, REPO / "src")}, short)
    if args.instructions:
        counted(variants, short, long)
        return
    per_step: dict[str, list[float]] = {name: [] for name in names}
    for pair in range(args.pairs):
        order = names[pair % len(names) :] + names[: pair % len(names)]
        cpu: dict[str, dict[int, float]] = {name: {} for name in names}
        for steps in (short, long):
            for name in order:
                with tempfile.TemporaryDirectory() as scratch:
                    command = variant_command(variants[name], steps, Path(scratch))
                    cpu[name][steps], _ = measure(command, REPO / "src", Path(scratch))
        for name in names:
            per_step[name].append(1000 * (cpu[name][long] - cpu[name][short]) / (long - short))
        print(f"pair {pair + 1}: " + ", ".join(f"{n} {per_step[n][-1]:.3f} ms" for n in names), flush=True)
    print()
    print(f"default: {spread(per_step['default'])} ms per step")
    print()
    print("| feature (default) | turned off by | cost per step, us | default / off |")
    print("| --- | --- | --- | --- |")
    for name, override in FEATURES.items():
        cost = [1000 * (a - b) for a, b in zip(per_step["default"], per_step[name], strict=True)]
        ratio = [a / b for a, b in zip(per_step["default"], per_step[name], strict=True)]
        us = f"{statistics.median(cost):.0f} [{min(cost):.0f} to {max(cost):.0f}]"
        print(f"| {name} | `{override}` | {us} | {spread(ratio)} |")


def variant_command(override: str | None, steps: int, scratch: Path) -> list[str]:
    return runner_command(steps, scratch) + ([override] if override is not None else [])


def counted(variants: dict[str, str | None], short: int, long: int) -> None:
    """Each variant once at each length under callgrind; a feature's cost in instructions per step."""
    jobs = {(name, steps): (functools.partial(variant_command, override, steps), REPO / "src")
            for name, override in variants.items() for steps in (short, long)}  # fmt: skip
    totals = count_all(jobs)
    per_step = {name: (totals[name, long] - totals[name, short]) / (long - short) for name in variants}
    print(f"default: {per_step['default'] / 1e6:.4f} M instructions per step")
    print()
    print("| feature (default) | turned off by | instructions per step | default / off |")
    print("| --- | --- | --- | --- |")
    for name, override in FEATURES.items():
        cost = per_step["default"] - per_step[name]
        print(f"| {name} | `{override}` | {cost / 1e3:.1f} K | {per_step['default'] / per_step[name]:.4f} |")


if __name__ == "__main__":
    main()
