"""With several processes the default path is DDP's own: its reducer all-reduces the gradients in
buckets during the backward, overlapped with it. Surviving out of memory there (on_oom=split) is asked
for by name, and the run plan says it gives the overlap up."""

import os
import subprocess
import sys

import pytest
from conftest import PLUGINS

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")


def buckets_of(tmp_path, *overrides: str) -> list[tuple[int, int, str]]:
    """Per rank: buckets DDP reduced, how many of them during the backward, and the strategy row."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [*TORCHRUN, str(PLUGINS / "ddp_overlap.py"), *overrides]
    ran = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = []
    for rank in (0, 1):
        counts, strategy = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        reduced, during = map(int, counts.split())
        said.append((reduced, during, strategy))
    return said


@pytest.mark.slow
def test_two_processes_by_default_reduce_the_gradients_inside_the_backward(tmp_path):
    for reduced, during, strategy in buckets_of(tmp_path):
        # Two micro-batches: the first under no_sync (no bucket), the second's two buckets reduced, the
        # first of them before the backward reached the first layer.
        assert (reduced, during) == (2, 1)
        assert "gradients averaged by DDP during the backward" in strategy
        assert "on_oom=split survives it" in strategy


@pytest.mark.slow
def test_on_oom_split_with_two_processes_averages_after_the_backward_and_says_so(tmp_path):
    for reduced, during, strategy in buckets_of(tmp_path, "on_oom=split"):
        assert (reduced, during) == (0, 0)  # no DDP reducer: runner averages after the window
        assert "not overlapped with it as DDP's reducer does" in strategy
