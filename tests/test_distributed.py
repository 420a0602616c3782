"""Several processes with real torchrun and gloo on CPU."""

import csv
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, event_files, job_dir, read_scalars, run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

ENV = {
    **os.environ,
    "PYTHONPATH": str(REPO / "tests" / "plugins") + os.pathsep + os.environ.get("PYTHONPATH", ""),
}
DATA = (
    "data=classification",
    "data.dataset.num_train=640",
    "trainer.max_steps=20",
    "trainer.log_every_n_steps=1",
)
# The test's own data set: a resume builds no target that only the run directory names, so it is given again.
OWN_DATA = "data.dataset._target_=slow_data.slow_classification"
# One NaN sample: the step whose batch holds it must be skipped alike by one process and by two.
NAN_SKIPPED = (
    "data.dataset._target_=slow_data.slow_classification", "+data.dataset.seconds_per_item=0",
    "+data.dataset.nan_sample=37", "on_nonfinite=skip",
)  # fmt: skip


def torchrun(*arguments: str, cwd, timeout: float = 240) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "runner", "train", *arguments]  # fmt: skip
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"]


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it, deepest first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree[::-1]


def exactly(series: list[tuple[int, float]]) -> list[tuple[int, str]]:
    """A scalar series compared value for value, NaN equal to NaN (repr round-trips every float)."""
    return [(step, repr(value)) for step, value in series]


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_two_processes_equal_one_and_resume_exactly_after_sigkill(tmp_path):
    """2 processes x batch 8 x accumulate 2 give the weights of 1 process x batch 32 on the same samples,
    a step with a non-finite gradient skipped alike; killed and resumed, the 2-process run ends exactly
    as if it had not stopped; a submitit job's two tasks are that same run."""
    single = run_cli(
        "train", *DATA, *NAN_SKIPPED, "data.batch_size=32", f"hydra.run.dir={tmp_path / 'one'}", cwd=tmp_path,
        env=ENV,
    )  # fmt: skip
    assert single.returncode == 0, single.stderr
    double = torchrun(
        *DATA, *NAN_SKIPPED, "data.batch_size=8", "accumulate=2", f"hydra.run.dir={tmp_path / 'two'}",
        cwd=tmp_path,
    )  # fmt: skip
    assert double.returncode == 0, double.stderr
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-5, atol=1e-5)
    for run in ("one", "two"):
        assert read_scalars(tmp_path / run)["train/skipped_steps"][-1][1] == 1, run
    assert "effective batch  32 = 8 (data.batch_size) x 2 (accumulate) x 2 processes" in double.stdout
    # Only rank 0 writes: one TensorBoard run, one checkpoint folder, Hydra's record once.
    assert sorted(p.name for p in (tmp_path / "two").iterdir() if p.name.startswith("train")) == [
        "train.log", "train.rank1.log",
    ]  # fmt: skip
    losses_one = [v for _, v in read_scalars(tmp_path / "one")["train/loss"]]
    losses_two = [v for _, v in read_scalars(tmp_path / "two")["train/loss"]]
    assert len(losses_two) == len(losses_one) == 20
    # The mean over both processes' samples: the one process's loss, NaN at the skipped step too.
    assert losses_two == pytest.approx(losses_one, rel=1e-5, nan_ok=True)

    # The same 2-process run, killed with SIGKILL at a random step and resumed, ends bit-identical.
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *DATA, *NAN_SKIPPED, "data.batch_size=8", "accumulate=2",
               "checkpoint.every_n_steps=1", "data.dataset.seconds_per_item=0.004",
               f"hydra.run.dir={killed}"]  # fmt: skip
    process = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    kill_at = killed / "checkpoints" / f"step_{random.randint(3, 15):08d}.pt"
    deadline = time.monotonic() + 120
    while not kill_at.exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    tree = process_tree(process.pid)
    for pid in tree:  # torchrun starts each worker in a session of its own: killpg would miss them
        os.kill(pid, signal.SIGKILL)
    process.wait()
    while any(Path(f"/proc/{pid}").exists() and not zombie(pid) for pid in tree):
        time.sleep(0.01)
    assert len(tree) >= 3, tree  # the agent and both ranks
    assert not (killed / "checkpoints" / "last.pt").exists()  # killed mid-run, not finished
    resumed = torchrun(f"resume={killed}", OWN_DATA, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    for key, tensor in weights(tmp_path / "two").items():
        assert torch.equal(weights(killed)[key], tensor), key
    for tag in ("train/loss", "train/skipped_steps"):  # exactly (repr: the skipped step's NaN equals NaN)
        assert exactly(read_scalars(killed)[tag]) == exactly(read_scalars(tmp_path / "two")[tag]), tag

    # A sweep job with two submitit tasks (as SLURM's tasks_per_node=2 gives) is the same 2-process run.
    sweep = run_cli(
        "train", "-m", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2", *DATA,
        *NAN_SKIPPED, "data.batch_size=8", "accumulate=2", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    for key, tensor in weights(tmp_path / "two").items():
        assert torch.equal(weights(job_dir(tmp_path / "sweep", 0))[key], tensor), key
    assert "x 2 processes" in (job_dir(tmp_path / "sweep", 0) / "train.log").read_text()
    assert (job_dir(tmp_path / "sweep", 0) / "train.rank1.log").read_text() == ""  # warnings only, and none


def test_sigterm_stops_every_rank_at_one_step_and_resume_needs_the_same_world_size(tmp_path):
    run_dir = tmp_path / "run"
    slow = ("data.dataset._target_=slow_data.slow_classification", "+data.dataset.seconds_per_item=0.003",
            "data.batch_size=8", "trainer.max_steps=60", "checkpoint.every_n_steps=1")  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "runner", "train", *DATA[:2], *slow, "trainer.log_every_n_steps=1",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    process = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoints" / "step_00000005.pt").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGTERM)  # as a cluster scheduler does: every process gets it
    out, err = process.communicate(timeout=120)
    saved = torch.load(run_dir / "checkpoints" / "last.pt")
    assert 5 <= saved["global_step"] < 60 and saved["world_size"] == 2
    # The resume command printed is torchrun's, with the same processes (the one-process one fails),
    # and gives again the _target_ a resume takes only from its command line.
    (printed,) = re.findall(r"resume with: (.*)", out + err)
    pythonpath, printed = printed.split(" ", 1)  # the PYTHONPATH the run was started with
    assert pythonpath.startswith("PYTHONPATH=") and str(REPO / "tests" / "plugins") in pythonpath
    assert printed == (
        f"python -m torch.distributed.run --standalone --nproc_per_node=2 -m runner train resume={run_dir} "
        f"{OWN_DATA}"
    )

    alone = run_cli("train", f"resume={run_dir}", OWN_DATA, cwd=tmp_path, env=ENV)
    assert alone.returncode == 2
    assert "saved by 2 process(es), resumed with 1" in alone.stderr

    command = [sys.executable, *shlex.split(printed)[1:]]  # as printed; python: this test's interpreter
    resumed = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert torch.load(run_dir / "checkpoints" / "last.pt")["global_step"] == 60
    steps = [step for step, _ in read_scalars(run_dir)["train/loss"]]
    assert steps == list(range(1, 61))  # no step missing, none twice


def test_a_sweep_under_torchrun_runs_each_job_on_every_rank(tmp_path):
    sweep = torchrun("-m", "seed=0,1", *DATA[:2], "trainer.max_steps=6", "data.batch_size=16", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").glob("*/*")
    with open(sweep_dir / "summary.csv") as handle:
        assert [row["status"] for row in csv.DictReader(handle)] == ["ok", "ok"]
    # Every rank names each job's directory alike: one directory per job, shared by both ranks.
    assert sorted(path.name for path in sweep_dir.iterdir() if path.is_dir()) == ["000_seed=0", "001_seed=1"]
    for job in (0, 1):
        assert "x 2 processes" in (job_dir(sweep_dir, job) / "train.log").read_text()
        assert (job_dir(sweep_dir, job) / "train.rank1.log").read_text() == ""
        assert len(event_files(job_dir(sweep_dir, job))) == 1  # rank 0's only

    optuna = torchrun("-m", "hparams_search=digits_optuna", cwd=tmp_path)
    assert optuna.returncode != 0
    assert "runner: error: hparams_search=digits_optuna: under torchrun a sweep runs" in optuna.stderr


# AdamW cannot see a uniform scale of the gradients (a 1/P left by the averaging over processes): plain SGD,
# unclipped, steps by the gradient itself, so a scale there moves the weights.
SGD = ("optimizer._target_=torch.optim.SGD", "~optimizer.betas", "optimizer.lr=0.5",
       "optimizer.weight_decay=0", "clip=null")  # fmt: skip


@pytest.mark.parametrize(("model", "optimizer"),
                         [("causal_lm.TinyCausalLM", ()), ("counted_lm.CountedCausalLM", ()),
                          ("causal_lm.TinyCausalLM", SGD)],
                         ids=["counted-from-labels", "said-by-the-model", "sgd"])  # fmt: skip
def test_two_processes_weigh_padded_lm_batches_by_every_process_tokens(
    tmp_path, model, optimizer, train_here, monkeypatch
):
    """Lines of different lengths: 2 processes x 1 line x accumulate 2 give the weights of 1 process x 4
    lines, because each micro-batch weighs by its tokens over all the processes' tokens of the step,
    counted from the labels or said by the model's output. The one process trains in this process (the
    real composed config): only the two need processes of their own. With SGD the gradient's scale
    shows in the weights too (AdamW's update does not change with it)."""
    example = REPO / "examples" / "causal_lm"
    env = {**ENV, "PYTHONPATH": str(example) + os.pathsep + ENV["PYTHONPATH"]}
    lm = (f"hydra.searchpath=[file://{example / 'conf'}]", "+experiment=causal_lm", "callbacks=none",
          f"model._target_={model}", "model.width=16", "model.layers=1", "trainer.max_steps=4",
          *optimizer)  # fmt: skip
    monkeypatch.syspath_prepend(str(example))  # as env's PYTHONPATH (train_here adds the test plug-ins)
    train_here(*lm, "data.batch_size=4", run_dir=tmp_path / "one")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *lm, "data.batch_size=1", "accumulate=2",
               f"hydra.run.dir={tmp_path / 'two'}"]  # fmt: skip
    double = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert double.returncode == 0, double.stderr
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-5)
    # train/loss: the window's mean over every process's tokens, as the one process logs it.
    logged = [read_scalars(tmp_path / run)["train/loss"] for run in ("one", "two")]
    assert [step for step, _ in logged[1]] == [step for step, _ in logged[0]]
    assert [loss for _, loss in logged[1]] == pytest.approx([loss for _, loss in logged[0]], rel=1e-4)
