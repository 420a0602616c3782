"""Training through the real CLI, as a user runs it."""

import math
import os

import pytest
import yaml
from conftest import REPO, TINY, read_scalars, run_cli

TRAIN_TAGS = {"train/loss", "train/grad_norm", "train/grad_norm_clipped", "train/lr", "perf/samples_per_sec"}


def test_mission_command_falls_back_to_fp32_on_cpu_with_one_warning(tmp_path, run_dir):
    result = run_cli("train", "precision=amp", "clip=1.0", *TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, warnings
    assert "precision=amp is not available" in warnings[0] and "uses fp32" in warnings[0]
    assert "precision        fp32 (requested amp:" in output
    assert f"tensorboard --logdir {run_dir}" in output
    assert "effective batch  16 = 16 (data.batch_size) x 1 (accumulate) x 1 (world size)" in output

    recorded = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert recorded["runtime"]["precision_used"] == "fp32"
    assert recorded["runtime"]["precision_requested"] == "amp"
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert (run_dir / "train.log").read_text().count("precision=amp is not available") == 1

    scalars = read_scalars(run_dir)
    hparams_tags = {"hparams/best_val_loss", "hparams/final_train_loss", "hparams/final_val_loss",
                    "hparams/final_val_acc"}  # fmt: skip
    assert set(scalars) == TRAIN_TAGS | {"val/loss", "val/acc"} | hparams_tags  # no loss_scale without AMP
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4]
    assert all(value <= 1.0 + 1e-5 for _, value in scalars["train/grad_norm_clipped"])
    assert all(math.isfinite(value) for _, value in scalars["train/loss"])


def test_seed_grad_clip_lab_through_the_runner(tmp_path, run_dir):
    """The seed's lab: seed 42, Linear(10,20)-ReLU-Linear(20,1), x=randn(32,10), y=randn(32,1)*50,
    MSE; total grad norm 38.7677 before clipping to 1.0, 1.0 after."""
    result = run_cli(
        "train", "seed=42", "data=regression", "data.dataset.num_train=32", "data.dataset.seed=null",
        "data.batch_size=32", "model.hidden=[20]", "optimizer=sgd", "clip=1.0",
        "trainer.max_steps=1", "trainer.log_every_n_steps=1", f"hydra.run.dir={run_dir}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    scalars = read_scalars(run_dir)
    assert round(scalars["train/grad_norm"][0][1], 4) == 38.7677
    assert round(scalars["train/grad_norm_clipped"][0][1], 4) == 1.0


def test_default_experiment_learns_the_digits(tmp_path):
    """``python -m runner train`` with no arguments: real data, >= 95% validation accuracy."""
    result = run_cli("train", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    scalars = read_scalars(run_dir)
    assert scalars["val/acc"][-1][1] >= 0.95
    assert scalars["train/loss"][-1][0] == 900  # 45 optimizer steps x 20 epochs
    split = yaml.safe_load((run_dir / "data_split.json").read_text())
    assert split["train_size"] + split["val_size"] == 1797
    assert not set(split["train_indices"]) & set(split["val_indices"])


def test_accumulation_scheduler_and_drawn_seed(tmp_path, run_dir):
    result = run_cli(
        "train", *TINY, "accumulate=2", "trainer.max_steps=null", "trainer.max_epochs=2",
        "scheduler=cosine", "scheduler.warmup_steps=2", "optimizer.lr=0.01", "seed=null",
        f"hydra.run.dir={run_dir}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seed = yaml.safe_load((run_dir / "run.yaml").read_text())["runtime"]["seed"]  # seed=null: drawn, recorded
    assert isinstance(seed, int) and 0 <= seed < 2**32
    assert f"seed             {seed} (drawn)" in result.stdout
    assert "effective batch  32 = 16 (data.batch_size) x 2 (accumulate)" in result.stdout
    assert "4 planned (2 per epoch" in result.stdout
    scalars = read_scalars(run_dir)
    assert [step for step, _ in scalars["train/lr"]] == [1, 2, 3, 4]
    assert [value for _, value in scalars["train/lr"]][:2] == pytest.approx([0.005, 0.01])
    assert [step for step, _ in scalars["val/loss"]] == [2, 4]


def test_readme_plugin_example(tmp_path, run_dir):
    """The README's worked example: a user's own model and data from their own folder."""
    plugin = REPO / "examples" / "plugin"
    result = run_cli(
        "train", f"hydra.searchpath=[file://{plugin / 'conf'}]", "data=xor", "model=linear",
        "trainer.max_epochs=2", f"hydra.run.dir={run_dir}", cwd=tmp_path,
        env={"PYTHONPATH": str(plugin) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert config["model"]["_target_"] == "my_project.linear_classifier"
    assert config["loss"]["_target_"] == "torch.nn.CrossEntropyLoss"
    assert "val/acc" in read_scalars(run_dir)
