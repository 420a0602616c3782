"""The non-finite guard, lr_find, the text built-in and the speed settings, through the real CLI."""

import os

import torch
from conftest import REPO, read_scalars, run_cli

PLUGINS = {"PYTHONPATH": str(REPO / "tests" / "plugins") + os.pathsep + os.environ.get("PYTHONPATH", "")}
NAN_DATA = (
    "data=regression", "data.dataset._target_=broken.one_nan_sample", "data.dataset.num_train=64",
    "data.batch_size=16", "trainer.max_epochs=2", "trainer.log_every_n_steps=1", "optimizer.lr=0.01",
)  # fmt: skip


def test_nonfinite_gradient_stops_before_the_update(tmp_path, run_dir):
    result = run_cli("train", *NAN_DATA, "checkpoint.every_n_steps=1", f"hydra.run.dir={run_dir}",
                     cwd=tmp_path, env=PLUGINS)  # fmt: skip
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("runner: error: non-finite gradient (total norm nan) at optimizer step ")
    assert "the update was not applied" in line and "lower the learning rate" in line
    assert "Traceback" not in result.stderr
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert "last.pt" not in checkpoints  # the last good periodic checkpoint is the one to resume
    step = int(line.split("at optimizer step ")[1].split()[0])
    if step > 1:
        saved = torch.load(run_dir / "checkpoints" / f"step_{step - 1:08d}.pt")
        assert all(torch.isfinite(t).all() for t in saved["model_state_dict"].values())


def test_skip_mode_skips_bad_steps_and_counts_them(tmp_path, run_dir):
    result = run_cli("train", *NAN_DATA, "on_nonfinite=skip", f"hydra.run.dir={run_dir}", cwd=tmp_path,
                     env=PLUGINS)  # fmt: skip
    assert result.returncode == 0, result.stderr
    scalars = read_scalars(run_dir)
    assert scalars["train/skipped_steps"][-1][1] == 2  # the NaN sample's window, once per epoch
    final = torch.load(run_dir / "checkpoints" / "last.pt")
    assert all(torch.isfinite(t).all() for t in final["model_state_dict"].values())


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


def test_text_built_in_trains_a_char_rnn(tmp_path, run_dir):
    """Also with deterministic algorithms on (runs of one seed being identical is shown by the resume
    tests, which compare separate runs bit for bit)."""
    result = run_cli("train", "data=text", "model=char_rnn", "trainer.max_steps=4", "model.hidden=32",
                     "deterministic=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    scalars = read_scalars(run_dir)
    assert 0 <= scalars["val/acc"][-1][1] <= 1
    assert torch.load(run_dir / "checkpoints" / "last.pt")["label_mapping"][0] == "\n"


def test_speed_settings_and_bf16_are_safe_on_cpu_and_say_so(tmp_path, run_dir):
    result = run_cli("train", "model=cnn", "channels_last=true", "precision=bf16", "trainer.max_steps=2",
                     "data.batch_size=8", f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "precision        bf16" in result.stdout  # this CPU has bf16: no fallback, no warning
    assert "WARNING" not in result.stdout + result.stderr
    speed = next(line for line in result.stdout.splitlines() if line.strip().startswith("speed"))
    if not torch.cuda.is_available():
        assert "pinned memory and non-blocking copies: CUDA only, off on cpu" in speed
        assert "tf32: needs a CUDA GPU" in speed
    assert "channels_last" in speed and "no conv layers" not in speed
