"""strategy=fsdp on two processes with real torchrun and gloo on CPU, through the real CLI."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import read_scalars, run_cli
from test_distributed import process_tree, torchrun, zombie

from runner.checkpoint.files import load_checkpoint
from runner.checkpoint.locate import own_checkpoint
from runner.cli.main import main

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

# A small transformer of three identical blocks on the bundled text (257 training windows): 4 steps
# of up to 64 windows stay inside the first epoch, so one process and two read the same samples.
# SGD with momentum: Adam turns the rounding noise on the attention's key bias (whose true gradient is
# zero: softmax ignores a shift shared by all keys) into full-size steps, in one process as in two.
TRANSFORMER = (
    "data=text", "model=char_transformer", "model.layers=3", "trainer.log_every_n_steps=1",
    "trainer.val_every_n_epochs=null",
)  # fmt: skip


def weights(run_dir, name="last"):
    """A plain run's last.pt, or a sharded run's folder read whole."""
    from runner.checkpoint.sharded import consolidated

    folder = run_dir / "checkpoints" / name
    if folder.is_dir():
        return consolidated(folder, load_checkpoint(folder))["model_state_dict"]
    return torch.load(folder.with_suffix(".pt"), weights_only=True)["model_state_dict"]


@pytest.mark.parametrize(
    "settings",
    [
        ("trainer.max_steps=4", "optimizer=sgd", "optimizer.momentum=0.9"),
        ("trainer.max_steps=4", "optimizer=sgd", "optimizer.momentum=0.9", "accumulate=2", "clip=0.5"),
    ],
    ids=str,
)
def test_two_sharded_processes_equal_one_process(tmp_path, settings, train_here):
    """2 processes x batch 16 with FSDP2 give the weights and losses of 1 process x batch 32 (trained in
    this process with the real composed config: only the two need processes of their own)."""
    train_here(*TRANSFORMER, *settings, "data.batch_size=32", run_dir=tmp_path / "one")
    two = torchrun(*TRANSFORMER, *settings, "strategy=fsdp", "data.batch_size=16",
                   f"hydra.run.dir={tmp_path / 'two'}", cwd=tmp_path)  # fmt: skip
    assert two.returncode == 0, two.stderr
    plan = " ".join(two.stdout.split())
    assert "fsdp (FSDP2): 3 blocks (Block) sharded one by one, then the rest, over 2 process(es)" in plan
    assert "per process (sharded over 2 processes, of" in plan
    plain, sharded = weights(tmp_path / "one"), weights(tmp_path / "two")
    for key in plain:
        torch.testing.assert_close(sharded[key], plain[key], rtol=1e-5, atol=1e-5)
    for tag in ("train/grad_norm", "train/loss"):  # the global norm; the mean over every process's samples
        steps_one, values_one = zip(*read_scalars(tmp_path / "one")[tag], strict=True)
        steps_two, values_two = zip(*read_scalars(tmp_path / "two")[tag], strict=True)
        assert steps_two == steps_one
        torch.testing.assert_close(torch.tensor(values_two), torch.tensor(values_one), rtol=1e-5, atol=1e-5)
    if "clip=0.5" in settings:  # clipping acted, on the global norm
        assert max(value for _, value in read_scalars(tmp_path / "two")["train/grad_norm"]) > 0.5
    # One shard file per process, and rank 1 warned of nothing.
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints" / "last").glob("*.distcp")) == [
        "__0_0.distcp", "__1_0.distcp",
    ]  # fmt: skip
    assert (tmp_path / "two" / "train.rank1.log").read_text() == ""


SIGKILLED = (
    *TRANSFORMER, "strategy=fsdp", "data.batch_size=16", "model.dropout=0.1", "trainer.max_steps=14",
    "checkpoint.every_n_steps=1", "checkpoint.keep_last=100", "trainer.val_every_n_steps=4",
)  # fmt: skip


def test_sigkill_during_a_sharded_save_then_resume_is_bit_identical(tmp_path):
    """Killed while step K's folder is being written: step K-1 is the newest valid checkpoint, and the
    resumed run ends exactly as the run that was never stopped."""
    reference = torchrun(*SIGKILLED, f"hydra.run.dir={tmp_path / 'reference'}", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr

    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *SIGKILLED, f"hydra.run.dir={killed}"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    step = random.randint(3, 10)
    deadline = time.monotonic() + 120
    while not (killed / "checkpoints" / "step_00000001").exists():  # every process is running
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    tree = process_tree(process.pid)  # found before the save begins: the kill follows it at once
    saved = killed / "checkpoints" / f"step_{step:08d}"
    saving = saved.with_name(f".{saved.name}.tmp")
    while not (saving.exists() or saved.exists()):  # on 2 busy cores the save may slip between two looks
        assert process.poll() is None and time.monotonic() < deadline
    for pid in tree:
        os.kill(pid, signal.SIGKILL)
    process.wait()
    while any(os.path.exists(f"/proc/{pid}") and not zombie(pid) for pid in tree):
        time.sleep(0.01)
    found = own_checkpoint(killed)
    assert found is not None
    if not saved.exists():  # killed during step K's save: step K-1 is the newest valid checkpoint
        assert found.checkpoint["global_step"] == step - 1, found

    resumed = torchrun(f"resume={killed}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not [path for path in (killed / "checkpoints").iterdir() if path.name.startswith(".")]
    for key, tensor in weights(tmp_path / "reference").items():
        assert torch.equal(weights(killed)[key], tensor), key
    for tag in ("train/loss", "train/grad_norm", "val/loss"):
        assert read_scalars(killed)[tag] == read_scalars(tmp_path / "reference")[tag], tag


def test_async_saves_reshard_on_resume_and_consolidate(tmp_path, monkeypatch, capsys):
    """checkpoint.async_save=true saves what a blocking save does; a checkpoint of two processes
    continues on one only with resume_reshard=true; consolidate gives a file eval reads. The refusal,
    consolidate and eval run the real command line in this process: none needs a process of its own."""
    run_dir = tmp_path / "async"
    settings = (*TRANSFORMER, "strategy=fsdp", "data.batch_size=16", "trainer.max_steps=6",
                "checkpoint.every_n_steps=2", "checkpoint.keep_last=10")  # fmt: skip
    background = torchrun(*settings, "checkpoint.async_save=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert background.returncode == 0, background.stderr
    assert "written in the background" in background.stdout
    blocking = torchrun(*settings, f"hydra.run.dir={tmp_path / 'blocking'}", cwd=tmp_path)
    assert blocking.returncode == 0, blocking.stderr
    for name in ("step_00000002", "step_00000004", "last"):
        saved, expected = weights(run_dir, name), weights(tmp_path / "blocking", name)
        assert all(torch.equal(saved[key], expected[key]) for key in expected), name

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as alone:
        main(["train", f"resume={run_dir}", "trainer.max_steps=8"])
    assert alone.value.code == 2
    refused = capsys.readouterr().err
    assert "saved by 2 process(es), resumed with 1" in refused and "resume_reshard=true" in refused
    resharded = run_cli(
        "train", f"resume={run_dir}", "trainer.max_steps=8", "resume_reshard=true", cwd=tmp_path
    )
    assert resharded.returncode == 0, resharded.stderr
    assert "the data order differs from the interrupted run's" in resharded.stdout + resharded.stderr
    assert load_checkpoint(run_dir / "checkpoints" / "last")["global_step"] == 8

    main(["consolidate", str(run_dir / "checkpoints" / "last")])  # an error would be SystemExit
    capsys.readouterr()
    main(["eval", f"ckpt={run_dir / 'consolidated' / 'last.pt'}"])
    evaluated = capsys.readouterr().out
    logged = read_scalars(run_dir)["val/loss"][-1]
    assert logged[0] == 8
    printed = float(evaluated.split("val/loss ")[1].split()[0])
    assert printed == pytest.approx(logged[1], rel=1e-5)
