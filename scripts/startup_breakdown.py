"""Where runner's start-up goes beyond what a hand-written loop also pays.

    python scripts/startup_breakdown.py              # 5 fresh processes, medians in ms
    python scripts/startup_breakdown.py --repeats 9

Each process first imports torch and ``torch._dynamo`` (which every ``torch.optim`` optimizer imports
when it is built), so what is left is runner's and Hydra's own: the time from there to each phase's
end, on the bench's tiny workload, up to the first training step (nothing is trained). Composition is
measured here in this process; in a real run a forked child composes while torch is imported
(``runner.compose_ahead``), so it costs the run's start-up only what it does not overlap.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import runner_command

PHASES = [
    "import runner.app (Hydra, OmegaConf, the schema)",
    "import runner.train (runner's modules)",
    "command-line checks",
    "Hydra: config search path and plugin scan",
    "Hydra: compose the config",
    "Hydra: run directory, .hydra/ record, logging",
    "runner: validate, build model, data, optimizer, plan, logger",
]

CHILD = """
import functools, json, sys, time
import torch, torch._dynamo
start = time.perf_counter()
ends = {}
def ended(phase):
    ends[phase] = time.perf_counter() - start
def before(owner, name, phase):
    original = getattr(owner, name)
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        ended(phase)
        return original(*args, **kwargs)
    setattr(owner, name, wrapper)
import runner.app as app
app.compose_ahead.worthwhile = lambda: False  # torch is already imported: nothing to overlap
ended(0)
import runner.train as train
ended(1)
import hydra._internal.hydra as hydra_internal, hydra._internal.utils as hydra_utils
before(hydra_utils, "create_automatic_config_search_path", 2)
before(hydra_internal.Hydra, "compose_config", 3)
before(hydra_internal, "run_job", 4)
before(train, "train", 5)
def fit(*args, **kwargs):
    ended(6)
    print(json.dumps(ends))
    raise SystemExit(0)
train.fit = fit
sys.argv = ["runner", *sys.argv[1:]]
app.main_train(sys.argv[2:])
"""


def one_process() -> list[float]:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        command = runner_command("tiny", 1, 20, run_dir)[3:]  # the overrides after `-m runner`
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        result = subprocess.run(
            [sys.executable, "-c", CHILD, *command], env=env, cwd=scratch, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        ends = json.loads(result.stdout.strip().splitlines()[-1])
    times = [ends[str(index)] for index in range(len(PHASES))]
    return [later - earlier for earlier, later in zip([0.0, *times], times, strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs = [one_process() for _ in range(args.repeats)]
    for index, phase in enumerate(PHASES):
        values = [1000 * run[index] for run in runs]
        print(f"{statistics.median(values):7.1f} ms  [{min(values):.0f}-{max(values):.0f}]  {phase}")
    totals = [1000 * sum(run) for run in runs]
    print(f"{statistics.median(totals):7.1f} ms  [{min(totals):.0f}-{max(totals):.0f}]  in all")


if __name__ == "__main__":
    main()
