"""A run never lands on another run, and out-of-range settings and environment variables are one line
before anything is written: through the real CLI (and torchrun), with the working directory compared
before and after."""

import os
import shutil
import socket
import subprocess
import sys

import pytest
from conftest import TINY, run_cli

from runner.checkpoint.locate import own_checkpoint
from runner.experiment.train import checkpoint_to_resume
from runner.training.distributed import in_submitit_job


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def snapshot(root) -> dict[str, tuple[int, int]]:
    """Every folder under ``root``, and every file with its size and modification time."""
    seen = {}
    for folder, _, files in os.walk(root):
        seen[os.path.relpath(folder, root) + "/"] = (0, 0)
        for name in files:
            stat = os.stat(os.path.join(folder, name))
            seen[os.path.relpath(os.path.join(folder, name), root)] = (stat.st_size, stat.st_mtime_ns)
    return seen


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("runner: error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


PORT = free_port()
NO_PEER = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(PORT), "LOCAL_RANK": "0"}
CASES = {
    # Another run's directory, without resume= (finished; killed: no result.json; a stray SUBMITIT_EXECUTOR).
    "finished-run": (("hydra.run.dir=run",), {}, "run: run already holds a run (checkpoints/, "),
    "killed-run": (("hydra.run.dir=run",), {}, "to continue it, give resume=run (or resume=auto)"),
    "stray-submitit-executor": (
        ("hydra.run.dir=run",),
        {"SUBMITIT_EXECUTOR": "local"},
        "run already holds a run",
    ),
    "resume-null": (("hydra.run.dir=run", "resume=null"), {}, "run already holds a run"),
    # A config file names the directory: refused before Hydra writes its record there.
    "config-file-names-it": (
        ("hydra.searchpath=[file://conf]", "+experiment=fixed_dir"),
        {},
        "hydra.run.dir=run: run already holds",
    ),
    "empty-run-dir": (
        ("hydra.run.dir=",),
        {},
        "hydra.run.dir=: an empty hydra.run.dir writes into the current",
    ),
    "blank-run-dir": (("hydra.run.dir=' '",), {}, "an empty hydra.run.dir writes into the current folder"),
    "empty-sweep-dir": (("-m", "hydra.sweep.dir=", "seed=1,2"), {}, "an empty hydra.sweep.dir writes"),
    # Bounds.
    "num-workers-huge": (
        ("data.num_workers=100000",),
        {},
        "data.num_workers=100000 is not allowed; data.num_workers must be an integer in [0, ",
    ),
    "max-steps-2**64": (
        ("trainer.max_steps=18446744073709551616",),
        {},
        "trainer.max_steps=18446744073709551616 is not allowed; 18446744073709551616 does not fit in 64 bits",
    ),
    "hidden-2**70-in-a-list": (
        ("model.hidden=[64,1180591620717411303424]",),
        {},
        "model.hidden=[64, 1180591620717411303424] is not allowed",
    ),
    "seed-2**63-in-a-sweep": (("-m", "seed=1,9223372036854775808"), {}, "seed=9223372036854775808 is not "),
    "world-size-junk": (
        (),
        {"WORLD_SIZE": "two"},
        "WORLD_SIZE='two' (an environment variable) is not allowed",
    ),
    "world-size-0": ((), {"WORLD_SIZE": "0"}, "WORLD_SIZE must be an integer >= 1"),
    "rank-junk": ((), {"RANK": "x"}, "RANK='x' (an environment variable) is not allowed; RANK must be 0"),
    "rank-past-world-size": ((), {"WORLD_SIZE": "2", "RANK": "2"}, "RANK must be an integer in [0, 2)"),
    "local-rank-negative": ((), {"LOCAL_RANK": "-1"}, "LOCAL_RANK='-1' (an environment variable) is not"),
    "world-size-2-alone": (
        (),
        {"WORLD_SIZE": "2"},
        "WORLD_SIZE=2 asks for 2 processes, but RANK, "
        "MASTER_ADDR, MASTER_PORT are not set; start several processes with torchrun",
    ),
    "master-port-junk": ((), {**NO_PEER, "RANK": "0", "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
    # No peer: rank 0 waits for the others, another rank for rank 0; each gives up after peer_timeout_s.
    "rank-0-without-peers": (
        ("peer_timeout_s=2",),
        {**NO_PEER, "RANK": "0"},
        f"WORLD_SIZE=2: the 2 processes did not all meet at 127.0.0.1:{PORT} within peer_timeout_s=2",
    ),
    "rank-1-without-rank-0": (
        ("peer_timeout_s=2",),
        {**NO_PEER, "RANK": "1", "LOCAL_RANK": "1"},
        "within peer_timeout_s=2 (rank 0 is not listening there)",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_run_is_one_line_and_writes_nothing(tmp_path, finished_run, case):
    arguments, env, expected = CASES[case]
    shutil.copytree(finished_run, tmp_path / "run")
    if case == "killed-run":
        (tmp_path / "run" / "result.json").unlink()
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "fixed_dir.yaml").write_text(
        "# @package _global_\nhydra:\n  run:\n    dir: run\n"
    )
    before = snapshot(tmp_path)
    result = run_cli("train", *TINY, *arguments, cwd=tmp_path, env=env, timeout=120)
    assert expected in one_error_line(result)
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_under_torchrun_a_refusal_is_one_line_per_rank_and_exit_2(tmp_path, finished_run):
    """torchrun itself then reports its ranks' exit status 2 with its own ChildFailedError traceback
    (torchrun's output, which runner cannot change): runner's own lines hold no traceback."""
    shutil.copytree(finished_run, tmp_path / "run")
    before = snapshot(tmp_path)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *TINY, f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    output = result.stdout + result.stderr
    ours = [line for line in output.splitlines() if line.startswith("runner:")]
    assert 1 <= len(ours) <= 2 and len(set(ours)) == 1, output  # torchrun may stop a rank before it says it
    assert (
        ours[0].startswith(f"runner: error: hydra.run.dir={tmp_path / 'run'}: ")
        and "already holds a run" in ours[0]
    )
    assert result.returncode != 0 and "exitcode  : 2" in output, output
    frames = [line.strip() for line in output.splitlines() if line.strip().startswith('File "')]
    assert frames and all("runpy" in frame or "torch/distributed" in frame for frame in frames), frames
    assert snapshot(tmp_path) == before


def test_a_stray_submitit_executor_is_not_a_job_and_does_not_resume(tmp_path, monkeypatch, train_here):
    """A SUBMITIT_EXECUTOR left in a shell made train continue the checkpoint it found in its directory."""
    from conftest import composed

    run_dir = train_here(*TINY)
    assert own_checkpoint(run_dir) is not None
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    assert not in_submitit_job()
    assert checkpoint_to_resume(composed(*TINY), run_dir, None) is None
    # What submitit's job process has: the executor, the job's id and its folder.
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "1234")
    monkeypatch.setenv("SUBMITIT_FOLDER", str(tmp_path / "submitit"))
    assert in_submitit_job()
    assert checkpoint_to_resume(composed(*TINY), run_dir, None).checkpoint["global_step"] == 4


@pytest.mark.slow
def test_eval_of_a_checkpoint_asking_for_too_many_workers_uses_what_this_machine_takes(
    tmp_path, finished_run
):
    """A checkpoint (from a larger machine, or forged) with data.num_workers=100000: eval has no setting
    for it and forks no more workers than the training limit (4 per CPU); its metrics do not change."""
    from runner.checkpoint.files import atomic_save, load_checkpoint

    checkpoint = load_checkpoint(finished_run / "checkpoints" / "last.pt")
    checkpoint["config"]["data"]["num_workers"] = 100000
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    atomic_save(checkpoint, run_dir / "checkpoints" / "last.pt")
    asked = run_cli("eval", f"ckpt={run_dir / 'checkpoints' / 'last.pt'}", cwd=tmp_path)
    plain = run_cli("eval", f"ckpt={finished_run / 'checkpoints' / 'last.pt'}", cwd=tmp_path)
    assert asked.returncode == 0 and plain.returncode == 0, asked.stderr + plain.stderr

    def metrics(result: subprocess.CompletedProcess) -> list[str]:  # the line less the checkpoint's path
        return [line.split(" step ", 1)[1] for line in result.stdout.splitlines() if "val/loss" in line]

    assert metrics(asked) and metrics(asked) == metrics(plain)


def test_a_folder_made_ahead_for_checkpoints_is_no_run_but_one_holding_a_file_is(tmp_path):
    """A user may make (or mount) ``checkpoints/`` before the first run; once it holds anything, the
    directory holds a run that a new one must not write over."""
    from runner.experiment.run_files import run_files_in

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    assert run_files_in(tmp_path) == []
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    assert run_files_in(tmp_path) == ["checkpoints/"]
