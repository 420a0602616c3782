"""A sum-reduced loss under real torchrun: 2 processes x 1 sample x accumulate 2 give the weights and
the per-sample train/loss of 1 process x 4 samples (each process's sums, times the process count that
DDP's averaging divides out)."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import read_scalars

pytestmark = pytest.mark.slow  # real subprocesses: torchrun is the point

SUMMED = (
    "data=classification", "data.dataset.num_train=64", "trainer.max_steps=4", "trainer.log_every_n_steps=1",
    "+loss.reduction=sum", "optimizer=sgd", "optimizer.lr=0.01", "clip=null",
)  # fmt: skip


def test_two_processes_accumulate_a_summed_loss_as_one_big_batch(tmp_path, train_here):
    train_here(*SUMMED, "data.batch_size=4", run_dir=tmp_path / "one")  # the reference: in this process
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *SUMMED, "data.batch_size=1", "accumulate=2",
               f"hydra.run.dir={tmp_path / 'two'}"]  # fmt: skip
    double = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert double.returncode == 0, double.stderr
    one, two = (
        torch.load(tmp_path / run / "checkpoints" / "last.pt")["model_state_dict"] for run in ("one", "two")
    )
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-5, atol=1e-6)
    logged = [read_scalars(tmp_path / run)["train/loss"] for run in ("one", "two")]
    assert [loss for _, loss in logged[1]] == pytest.approx([loss for _, loss in logged[0]], rel=1e-5)
