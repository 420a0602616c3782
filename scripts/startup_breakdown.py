"""Where runner's start-up goes beyond what a hand-written loop also pays.

    python scripts/startup_breakdown.py              # 5 fresh processes, medians in ms
    python scripts/startup_breakdown.py --repeats 9

Each process first imports torch and ``torch._dynamo`` (which every ``torch.optim`` optimizer imports
when it is built), so what is left is runner's and Hydra's own: the time from there to each phase's
end, on the bench's tiny workload, up to the first training step (nothing is trained). Hydra is timed
from the outside only (through its public ``hydra.main``): its search path, plugin scan, both
compositions (the first reads ``hydra.mode``; facebookresearch/hydra#3440), run directory, record and
logging are one phase.
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
    "import runner's command line (Hydra, OmegaConf, the schema)",
    "import runner's training modules",
    "command-line checks",
    "Hydra's main: search path, plugins, composition (twice), run dir, record, logging",
    "runner: typed config, build model, data, optimizer, plan, logger",
]

CHILD = """
import json, sys, time
import torch, torch._dynamo
start = time.perf_counter()
ends = {}
def ended(phase):
    ends[phase] = time.perf_counter() - start
import runner.cli.train as cli_train
ended(0)
import runner.experiment.train as train
ended(1)
from runner.cli.arguments import CommandLine
from runner.cli.hydra.hydra_app import check_command_line, run_hydra
command_line = CommandLine.parse(sys.argv[2:])
check_command_line(command_line)
ended(2)
def task(cfg):
    ended(3)
    return cli_train.train_task(cfg)
def before_the_first_step(*args, **kwargs):
    ended(4)
    print(json.dumps(ends))
    raise SystemExit(0)
train.Run = before_the_first_step  # runner's own loop, stopped before the first step
run_hydra(task, command_line)
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
