"""The long form of the file fuzzer (issue 32): the Hypothesis properties of tests/test_fuzz_files.py with
many examples each, not derandomized, shrinking what fails.

    python scripts/fuzz_files.py                      # 500 examples per property (about 20-40 min here)
    python scripts/fuzz_files.py --examples 100 -k checkpoint

Each property mutates a real file of a finished run (checkpoints, a sharded checkpoint's ``runner.pt``,
``.hydra/overrides.yaml``, ``run.yaml``, event files, an Optuna study's database) by bit flips,
truncation, shared values, YAML aliases, deep nesting, links, FIFOs and out-of-range values, and asserts
that runner's reader answers in one line, writes nothing, and ends within 120 s (Hypothesis' deadline;
a hang is 2**40 values walked).
Exit status: pytest's (0: nothing found). A failure is printed with the example that makes it, shrunk.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="examples per property (default 500)")
    parser.add_argument("-k", dest="select", help="only the properties whose name holds this (pytest -k)")
    parser.add_argument("--with-cli", action="store_true", help="also the test that runs the CLI")
    options = parser.parse_args()
    select = options.select or ""
    if not options.with_cli:
        select = f"({select}) and not cli" if select else "not cli"
    env = {
        **os.environ,
        "RUNNER_FUZZ_PROFILE": "long",
        "RUNNER_FUZZ_EXAMPLES": str(options.examples),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz_files.py",
               "-k", select, "--hypothesis-show-statistics"]  # fmt: skip
    sys.exit(subprocess.run(command, cwd=REPO, env=env).returncode)


if __name__ == "__main__":
    main()
