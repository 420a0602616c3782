"""Training through the real CLI, as a user runs it."""

import math

import pytest
import yaml
from conftest import TINY, read_scalars, run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

TRAIN_TAGS = {
    "train/loss", "train/grad_norm", "train/grad_norm_clipped", "train/lr", "vitals/samples_per_sec",
    "vitals/time/data", "vitals/time/compute", "vitals/time/validation", "vitals/time/runner",
}  # fmt: skip


def test_mission_command_falls_back_to_fp32_on_cpu_with_one_warning(tmp_path, run_dir):
    result = run_cli("train", "precision=amp", "clip=1.0", *TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, warnings
    assert "precision=amp is not available" in warnings[0] and "uses fp32" in warnings[0]
    assert "precision        fp32 (requested amp:" in output
    assert f"tensorboard --logdir {run_dir}" in output
    assert "effective batch  16 = 16 (data.batch_size) x 1 (accumulate) x 1 process" in output

    recorded = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert recorded["runtime"]["precision_used"] == "fp32"
    assert recorded["runtime"]["precision_requested"] == "amp"
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert (run_dir / "train.log").read_text().count("precision=amp is not available") == 1

    scalars = read_scalars(run_dir)
    assert set(scalars) == TRAIN_TAGS | {"val/loss", "val/acc", "val/loss_best"}  # no loss_scale without AMP
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4]
    assert all(value <= 1.0 + 1e-5 for _, value in scalars["train/grad_norm_clipped"])
    assert all(math.isfinite(value) for _, value in scalars["train/loss"])
