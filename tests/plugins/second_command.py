"""Test-only data: the built-in classification, built while a second runner command runs to its end (a
command into the same folder, started while the first one sets up: the race a lock must close)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from runner.data import make_classification


def while_another_runs(command: list[str], cwd: str, record: str, **kwargs):
    """Run ``python -m runner *command`` in ``cwd``; its exit status and stderr go to ``record``."""
    if not Path(record).exists():  # once: a sweep's jobs each build their data
        result = subprocess.run(
            [sys.executable, "-m", "runner", *command], cwd=cwd, capture_output=True, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240,
        )  # fmt: skip
        Path(record).write_text(json.dumps({"returncode": result.returncode, "stderr": result.stderr}))
    return make_classification(**kwargs)
