"""The non-finite guard, lr_find, the text built-in and the speed settings, through the real CLI."""

import os

import pytest
import torch
from conftest import REPO, read_scalars, run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

PLUGINS = {"PYTHONPATH": str(REPO / "tests" / "plugins") + os.pathsep + os.environ.get("PYTHONPATH", "")}
NAN_DATA = (
    "data=regression", "data.dataset._target_=broken.one_nan_sample", "data.dataset.num_train=64",
    "data.batch_size=16", "trainer.max_epochs=2", "trainer.log_every_n_steps=1", "optimizer.lr=0.01",
)  # fmt: skip


def test_nonfinite_gradient_stops_before_anything_holding_it_is_saved(tmp_path, run_dir):
    result = run_cli("train", *NAN_DATA, "checkpoint.every_n_steps=1", f"hydra.run.dir={run_dir}",
                     cwd=tmp_path, env=PLUGINS)  # fmt: skip
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("runner: error: non-finite gradient (total norm nan) at optimizer step ")
    assert "before anything after step" in line and "lower the learning rate" in line
    assert "Traceback" not in result.stderr
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert "last.pt" not in checkpoints  # the last good periodic checkpoint is the one to resume
    step = int(line.split("at optimizer step ")[1].split()[0])
    if step > 1:
        saved = torch.load(run_dir / "checkpoints" / f"step_{step - 1:08d}.pt")
        assert all(torch.isfinite(t).all() for t in saved["model_state_dict"].values())


def test_lr_find_suggests_a_rate_and_writes_the_curve(tmp_path):
    result = run_cli("lr_find", "data=classification", "data.dataset.num_train=256", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (suggestion,) = [line for line in result.stdout.splitlines() if line.startswith("suggested:")]
    lr = float(suggestion.split("optimizer.lr=")[1])
    assert 1e-6 <= lr <= 10
    (run_dir,) = (tmp_path / "outputs" / "lr_find").glob("*/*")
    assert (run_dir / "lr_find.png").read_bytes()[:4] == b"\x89PNG"
    scalars = read_scalars(run_dir)
    lrs = [value for _, value in scalars["lr_find/lr"]]
    assert lrs == sorted(lrs) and len(scalars["lr_find/loss"]) == len(lrs) >= 10
    assert not list(run_dir.glob("checkpoints"))
