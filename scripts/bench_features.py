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
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from bench_against import REPO, measure, runner_command, spread

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
    args = parser.parse_args()
    short, long = map(int, args.steps.split(","))
    variants = {"default": None, **FEATURES}
    names = list(variants)
    per_step: dict[str, list[float]] = {name: [] for name in names}
    for pair in range(args.pairs):
        order = names[pair % len(names) :] + names[: pair % len(names)]
        cpu: dict[str, dict[int, float]] = {name: {} for name in names}
        for steps in (short, long):
            for name in order:
                with tempfile.TemporaryDirectory() as scratch:
                    command = runner_command(steps, Path(scratch))
                    if variants[name] is not None:
                        command.append(variants[name])
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


if __name__ == "__main__":
    main()
