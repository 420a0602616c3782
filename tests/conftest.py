import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO = Path(__file__).resolve().parents[1]


def run_cli(*arguments: str, cwd: Path, env: dict | None = None, timeout: float = 240):
    """``python -m runner ...`` in a real subprocess, as a user runs it."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "runner", *arguments],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a run, read back with TensorBoard's own reader."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


# A few optimizer steps on the tiny built-ins: what most CLI tests need.
TINY = (
    "data=classification",
    "data.dataset.num_train=64",
    "data.dataset.num_val=32",
    "data.batch_size=16",
    "trainer.max_steps=4",
    "trainer.log_every_n_steps=1",
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"
