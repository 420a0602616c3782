"""The GPU benchmark (``scripts/bench_gpu.py``) runs on the CPU as a dry run, so that it does not rot
before a GPU is lent: both loops train every workload and accumulation, and the table has their rows."""

import os
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow
def test_the_gpu_benchmark_runs_dry_on_the_cpu():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_gpu.py"), "--dry-run"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("small", "medium"))]
    expected = [("small", "1"), ("small", "4"), ("medium", "1"), ("medium", "4")]
    assert [(row[0], row[1]) for row in rows] == expected
    for row in rows:
        raw, ours, ratio = float(row[2]), float(row[3]), float(row[4])
        assert raw > 0 and ours > 0 and ratio == pytest.approx(ours / raw, abs=0.01)
        assert float(row[5]) == float(row[6]) == 0  # no CUDA here: no CUDA sync to count
