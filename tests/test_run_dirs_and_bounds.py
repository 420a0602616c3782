"""A run never lands on another run, and out-of-range settings and environment variables are one line
before anything is written. The refusals themselves (another run's directory, empty ones, bounds, the
process environment, under torchrun) are hostile-input cases (``tests/hostile_inputs/cases.py``, run by
test_hostile_inputs.py); here what a refusal alone does not show."""

import shutil
import subprocess

import pytest
from conftest import TINY, run_cli

from runner.checkpoint.locate import own_checkpoint
from runner.experiment.train import checkpoint_to_resume
from runner.training.distributed import in_submitit_job


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
