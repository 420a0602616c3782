"""Long runs under real torchrun: a worker group restarted by ``--max-restarts`` continues its run by
itself, and two torchrun agents joined by a c10d rendezvous (two "nodes") train as one group."""

import os
import re
import socket
import subprocess
import sys

import pytest
import torch
from conftest import REPO, read_scalars

pytestmark = pytest.mark.slow  # real torchrun: the processes are the point

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "tests" / "plugins")}
RUN = (
    "data=classification", "data.dataset.num_train=256", "data.batch_size=16", "trainer.max_steps=10",
    "trainer.log_every_n_steps=1", "checkpoint.every_n_steps=2",
    "+callbacks.kill._target_=killer.KillsRankAtStep",
)  # fmt: skip
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def last(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def test_a_restarted_group_continues_its_run_exactly_and_two_agents_train_as_one_group(tmp_path):
    """Rank 1 is SIGKILLed at step 5 (after the checkpoint of step 4); torchrun restarts both workers,
    which continue the same run folder from step 4: the run ends with the weights and the logged
    losses of the same run on two "nodes" (two agents, c10d rendezvous) that nothing interrupted."""
    restarted = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc_per_node=2", "--max-restarts=1", "-m", "runner", "train", *RUN],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").glob("*/*")  # one run folder: the restart went on in it
    line = next(line for line in restarted.stderr.splitlines() if "torchrun restart" in line)
    assert line == (
        f"runner: torchrun restart 1 (of --max-restarts=1): continuing the run in {run_dir} from its newest "
        "checkpoint (step 4); the interrupted attempt had logged step 5: 1 step redone"
    )
    port = free_port()
    agent = [*TORCHRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-nodes", "-m", "runner", "train", *RUN,
             "+callbacks.kill.at=-1", f"hydra.run.dir={tmp_path / 'nodes'}"]  # fmt: skip
    logs = [tmp_path / f"agent{number}.log" for number in (0, 1)]
    agents = [
        subprocess.Popen(agent, cwd=tmp_path, env=ENV, stdout=log.open("w"), stderr=subprocess.STDOUT)
        for log in logs
    ]
    assert [agent.wait(timeout=400) for agent in agents] == [0, 0], [log.read_text()[-3000:] for log in logs]
    assert any("x 2 processes" in log.read_text() for log in logs)  # the run plan's effective batch
    one_group, continued = last(tmp_path / "nodes"), last(run_dir)
    assert one_group["world_size"] == continued["world_size"] == 2
    for name, tensor in one_group["model_state_dict"].items():
        assert torch.equal(continued["model_state_dict"][name], tensor), name
    assert read_scalars(run_dir)["train/loss"] == read_scalars(tmp_path / "nodes")["train/loss"]


def test_a_restarted_single_process_continues_its_run_exactly_in_its_folder_or_the_one_named(tmp_path):
    """torchrun with one process has no process group: its restart still continues the first start's
    folder (found in the agent store, or the one hydra.run.dir names: not refused as a run already
    there) from step 4, and ends as the same run that nothing interrupted, bit for bit."""
    alone = [*TORCHRUN, "--standalone", "--nproc-per-node=1", "--max-restarts=1", "-m", "runner", "train",
             *RUN, "+callbacks.kill.rank=0"]  # fmt: skip
    found = subprocess.run(alone, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=400)
    assert found.returncode == 0, found.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").glob("*/*")  # one run folder: the restart went on in it
    named = tmp_path / "named"
    given = subprocess.run([*alone, f"hydra.run.dir={named}"], cwd=tmp_path, env=ENV, capture_output=True,
                           text=True, timeout=400)  # fmt: skip
    assert given.returncode == 0, given.stderr[-3000:]
    # The killed process writes the checkpoints, in the background: step 4's may not have been done.
    said = r"from its newest checkpoint \(step [24]\); the interrupted attempt had logged step \d: \d steps? "
    for restarted, folder in ((found, run_dir), (given, named)):
        line = next(line for line in restarted.stderr.splitlines() if "torchrun restart" in line)
        assert re.fullmatch(
            re.escape(f"runner: torchrun restart 1 (of --max-restarts=1): continuing the run in {folder} ")
            + said
            + "redone",
            line,
        ), line
    plain = tmp_path / "plain"
    uninterrupted = subprocess.run(
        [sys.executable, "-m", "runner", "train", *RUN, "+callbacks.kill.at=-1", f"hydra.run.dir={plain}"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    for folder in (run_dir, named):
        assert last(folder)["global_step"] == 10
        for name, tensor in last(plain)["model_state_dict"].items():
            assert torch.equal(last(folder)["model_state_dict"][name], tensor), (folder, name)
        assert read_scalars(folder)["train/loss"] == read_scalars(plain)["train/loss"]
