"""Checkpoints, resume and preemption through real training subprocesses."""

import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, read_scalars, run_cli, snapshot

from runner.checkpoint.files import atomic_save
from runner.cli.main import main

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

PLUGINS = str(REPO / "tests" / "plugins")
ENV = {"PYTHONPATH": PLUGINS + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
# The test's own data set: a resume builds no target that only the run directory names, so it is given again.
OWN_DATA = "data.dataset._target_=slow_data.slow_classification"
# 100 samples in batches of 8: 13 micro-batches (the last one short), 7 optimizer steps per epoch with
# accumulate=2 (the last window short); 30 steps end mid-epoch. Dropout makes the RNG state matter.
SLOW_RUN = (
    "data=classification", "data.dataset._target_=slow_data.slow_classification",
    "+data.dataset.seconds_per_item=0.002", "data.dataset.num_train=100", "data.dataset.num_val=40",
    "data.batch_size=8", "accumulate=2", "model.dropout=0.2", "trainer.max_steps=30",
    "trainer.log_every_n_steps=1", "trainer.val_every_n_steps=5", "checkpoint.every_n_steps=1",
    "checkpoint.keep_last=100", "seed=5",
)  # fmt: skip


def start(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "train", *SLOW_RUN, *extra, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def wait_for_checkpoint(run_dir: Path, step: int, process: subprocess.Popen, timeout: float = 120) -> None:
    target = run_dir / "checkpoints" / f"step_{step:08d}.pt"
    deadline = time.monotonic() + timeout
    while not target.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.002)


def final_states(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def assert_same_run(resumed: Path, reference: Path) -> None:
    a, b = final_states(resumed), final_states(reference)
    assert a["global_step"] == b["global_step"] == 30
    for key, tensor in b["model_state_dict"].items():
        assert torch.equal(a["model_state_dict"][key], tensor), key
    for index, values in b["optimizer_state_dict"]["state"].items():
        for name, value in values.items():
            assert torch.equal(a["optimizer_state_dict"]["state"][index][name], value)
    resumed_scalars, reference_scalars = read_scalars(resumed), read_scalars(reference)
    for tag in ("train/loss", "train/grad_norm", "train/lr", "val/loss", "val/acc"):
        assert resumed_scalars[tag] == reference_scalars[tag], tag  # no duplicated, no missing steps


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run_dir.parent.mkdir(exist_ok=True)
    process = start(run_dir)
    _, err = process.communicate(timeout=240)
    assert process.returncode == 0, err
    return run_dir


def test_sigkill_at_a_random_step_then_resume_is_bit_identical(tmp_path, reference_run):
    run_dir = tmp_path / "run"
    kill_step = random.randint(3, 26)
    process = start(run_dir)
    wait_for_checkpoint(run_dir, kill_step, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run_dir / "checkpoints" / "last.pt").exists()

    result = run_cli("train", f"resume={run_dir}", OWN_DATA, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr
    assert "resumed from" in result.stdout
    # The plan names the run's overrides it took again (all but the one this command line gives).
    plan = result.stdout.split("re-applied", 1)[1].split("run dir", 1)[0]
    assert " ".join(plan.split()) == " ".join(o for o in SLOW_RUN if o != OWN_DATA)
    assert_same_run(run_dir, reference_run)


@pytest.mark.parametrize(("signal_number", "exit_code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_at_a_step_boundary_and_resume_finishes_the_run(
    tmp_path, reference_run, signal_number, exit_code
):
    run_dir = tmp_path / "run"
    process = start(run_dir, "resume=auto")  # finds no checkpoint of its own: starts afresh
    wait_for_checkpoint(run_dir, 10, process)
    process.send_signal(signal_number)
    out, err = process.communicate(timeout=60)
    assert process.returncode == exit_code, err
    pythonpath = os.pathsep.join(entry for entry in ENV["PYTHONPATH"].split(os.pathsep) if entry)
    assert f"resume with: PYTHONPATH={shlex.quote(pythonpath)} python -m runner train resume={run_dir}" in out
    saved = final_states(run_dir)
    assert 10 <= saved["global_step"] < 30
    logged = read_scalars(run_dir)["train/loss"]
    assert logged[-1][0] == saved["global_step"]  # TensorBoard was flushed up to the saved step

    if signal_number == signal.SIGTERM:  # finishing the run is the same for both signals
        # What a scheduler that requeues a job does: the very same command, in the same directory.
        result = run_cli("train", *SLOW_RUN, "resume=auto", f"hydra.run.dir={run_dir}", cwd=tmp_path, env=ENV)
        assert result.returncode == 0, result.stderr
        assert "resumed from" in result.stdout and "last.pt" in result.stdout
        assert_same_run(run_dir, reference_run)


def test_second_sigint_aborts_at_once(tmp_path):
    run_dir = tmp_path / "run"
    process = start(run_dir, "++data.dataset.seconds_per_item=0.05")
    wait_for_checkpoint(run_dir, 2, process)
    time.sleep(0.2)  # inside step 3, which takes about 0.8 s: both signals arrive before it ends
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "runner: aborted" in err
    assert "Traceback" not in err
    assert not (run_dir / "checkpoints" / "last.pt").exists()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    result = run_cli(
        "train", "data=classification", "data.dataset.num_train=64", "data.dataset.num_val=32",
        "data.batch_size=16", "trainer.max_epochs=3", f"hydra.run.dir={run_dir}", cwd=run_dir.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return run_dir


@pytest.fixture
def refused(tmp_path, monkeypatch, capsys):
    """``python -m runner ARGUMENTS`` from ``tmp_path``, in this process (the real ``main``, Hydra and
    all: a refusal needs no process of its own), refused: exit 2; what it wrote to stderr."""
    monkeypatch.chdir(tmp_path)

    def run(*arguments: str) -> str:
        with pytest.raises(SystemExit) as exited:
            main(list(arguments))
        error = capsys.readouterr().err
        assert exited.value.code == 2, error
        return error

    return run


def test_eval_prints_the_checkpoints_validation_metrics(finished_run, tmp_path):
    result = run_cli("eval", f"ckpt={finished_run / 'checkpoints' / 'last.pt'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "step 12 epoch 3 val/loss" in result.stdout and "val/acc" in result.stdout
    logged_val_loss = read_scalars(finished_run)["val/loss"][-1][1]
    printed = float(result.stdout.split("val/loss ")[1].split()[0])
    assert printed == pytest.approx(logged_val_loss, rel=1e-5)


def test_resume_refuses_changed_math_and_accepts_a_longer_run(finished_run, tmp_path, refused):
    changed = refused("train", f"resume={finished_run}", "optimizer.lr=0.5")
    assert "optimizer.lr (0.001 -> 0.5)" in changed and "would change its math" in changed

    reshaped = refused("train", f"resume={finished_run}", "model.hidden=[32]")
    assert "model.hidden ([64] -> [32])" in reshaped
    dropout = refused("train", f"resume={finished_run}", "model.dropout=0.5")
    assert "model.dropout (0.0 -> 0.5)" in dropout  # fits the saved weights, and still changes the math
    assert "Traceback" not in reshaped + changed + dropout

    run_dir = tmp_path / "copy"  # the module's finished run stays as it is for the other tests
    shutil.copytree(finished_run, run_dir)
    original_record = (run_dir / ".hydra" / "overrides.yaml").read_text()
    longer = run_cli("train", f"resume={run_dir}", "trainer.max_epochs=4", cwd=tmp_path)
    assert longer.returncode == 0, longer.stderr
    assert torch.load(run_dir / "checkpoints" / "last.pt")["global_step"] == 16
    assert [step for step, _ in read_scalars(run_dir)["val/loss"]] == [4, 8, 12, 16]
    assert (
        run_dir / ".hydra" / "overrides.yaml"
    ).read_text() == original_record  # the original record is kept


def test_corrupted_checkpoints(tmp_path, finished_run, refused):
    run_dir = tmp_path / "outputs" / "day" / "run"
    shutil.copytree(finished_run, run_dir)
    for name in ("last.pt", "best.pt", "step_00000012.pt", "step_00000008.pt"):  # keep their order in time
        (run_dir / "checkpoints" / name).touch()
        time.sleep(0.01)
    last = run_dir / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    for name in ("best.pt", "step_00000012.pt"):
        (run_dir / "checkpoints" / name).unlink()
    direct = refused("train", f"resume={last}")
    assert f"checkpoint {last} is truncated or corrupted" in direct

    latest = run_cli("train", "resume=latest", "trainer.max_epochs=4", cwd=tmp_path)
    assert latest.returncode == 0, latest.stderr
    assert f"skipping checkpoint {last} is truncated" in latest.stderr
    assert "resumed from" in latest.stdout and "step_00000008.pt (step 8, epoch 2)" in latest.stdout


def flip_bytes_inside_a_tensor(path: Path, tensor: torch.Tensor) -> None:
    data = bytearray(path.read_bytes())
    start = data.find(tensor.numpy().tobytes()[:64])
    assert start > 0
    data[start + 32 : start + 48] = bytes(b ^ 0xFF for b in data[start + 32 : start + 48])
    path.write_bytes(data)


def test_a_byte_changed_on_disk_is_detected_and_a_run_dir_resume_takes_the_previous_file(
    tmp_path, finished_run, refused
):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    last = run_dir / "checkpoints" / "last.pt"
    flip_bytes_inside_a_tensor(last, torch.load(last)["model_state_dict"]["1.weight"])
    for command in (("eval", f"ckpt={last}"), ("train", f"resume={last}")):
        error = refused(*command)
        assert f"checkpoint {last} is corrupted: its contents do not match the checksum" in error
        assert "Traceback" not in error
    resumed = run_cli("train", f"resume={run_dir}", "trainer.max_epochs=4", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"skipping checkpoint {last} is corrupted" in resumed.stderr
    assert "step_00000012.pt (step 12, epoch 3)" in resumed.stdout


def test_a_checkpoint_or_run_directory_that_names_code_never_runs_it(tmp_path, finished_run, refused):
    """The stored config of a checkpoint, and a run directory's record of its command line, are data:
    a ``_target_`` in them that nobody named on this machine is refused before it is imported."""
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.pt"
    checkpoint = torch.load(finished_run / "checkpoints" / "last.pt")
    checkpoint["config"]["model"] = {"_target_": "pathlib.Path.touch", "self": str(marker)}
    atomic_save(checkpoint, evil)  # with a valid checksum: whoever changed it can compute one
    error = refused("eval", f"ckpt={evil}")
    assert "names model._target_=pathlib.Path.touch, which neither runner's configs" in error
    assert "allow them with allow_targets=pathlib.Path.touch" in error
    assert not marker.exists()

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    record = run_dir / ".hydra" / "overrides.yaml"
    record.write_text(record.read_text() + f"- model._target_=pathlib.Path.touch\n- +model.self={marker}\n")
    before = snapshot(run_dir)
    error = refused("train", f"resume={run_dir}")
    assert f"{record} names model._target_=pathlib.Path.touch" in error
    assert "give model._target_=pathlib.Path.touch on this command line" in error
    assert not marker.exists() and snapshot(run_dir) == before

    # An interpolation that makes a mapping with a _target_ (inside a list, where no key check looks).
    create = f"${{oc.create:{{_target_: pathlib.Path.touch, self: {marker}}}}}"
    model = torch.load(finished_run / "checkpoints" / "last.pt")["config"]["model"]
    checkpoint["config"]["model"] = {**model, "extra": [create]}
    atomic_save(checkpoint, evil)
    error = refused("eval", f"ckpt={evil}")
    # Refused before anything resolves it: a checkpoint's config is saved resolved.
    assert "holds model.extra.0=${oc.create:{_target_: pathlib.Path.touch" in error
    shutil.rmtree(run_dir)
    shutil.copytree(finished_run, run_dir)
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "g.yaml").write_text(
        f"# @package _global_\nmetrics: {{evil: {{_target_: pathlib.Path.touch, self: {marker}}}}}\n"
    )
    for planted in (
        f"\"+metrics.acc.extra=['{create}']\"",
        f'"metrics=[accuracy,{"../" * 12}{tmp_path}/evil/g]"',
    ):
        record.write_text((finished_run / ".hydra" / "overrides.yaml").read_text() + f"- {planted}\n")
        before = snapshot(run_dir)
        error = refused("train", f"resume={run_dir}", "trainer.max_epochs=4")
        assert "Traceback" not in error and snapshot(run_dir) == before
    assert not marker.exists()

    hydra_record = run_dir / ".hydra" / "hydra.yaml"
    record.write_text("- data=classification\n")
    hydra_record.write_text("hydra:\n  overrides:\n    hydra:\n    - hydra.searchpath=[file://elsewhere]\n")
    error = refused("train", f"resume={run_dir}")
    assert "the run was started with hydra.searchpath=[file://elsewhere]; runner takes no config" in error


def test_a_refused_resume_leaves_the_run_directory_as_it_was(tmp_path, finished_run, refused):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    before = snapshot(run_dir)
    for bad in ("optimizer.lr=0.5", "model._target_=nope.Model", "data.dataset.num_val=0"):
        error = refused("train", f"resume={run_dir}", "trainer.max_epochs=4", bad)
        assert "Traceback" not in error
        assert snapshot(run_dir) == before, bad


class WritesAFile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_pickled_code_in_a_checkpoint_is_refused_and_never_runs(tmp_path, refused):
    marker = tmp_path / "code-ran"
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("[]\n")
    evil = run_dir / "checkpoints" / "last.pt"
    torch.save({"model_state_dict": WritesAFile(marker), "optimizer_state_dict": {}, "epoch": 1,
                "best_val": 0.1, "global_step": 1}, evil)  # fmt: skip
    for command in (("train", f"resume={evil}"), ("eval", f"ckpt={evil}")):
        error = refused(*command)
        assert f"checkpoint {evil} was refused" in error
        assert "weights_only" in error
        assert not marker.exists()


def submitit_task_pid(submitit_folder: Path, process: subprocess.Popen, timeout: float = 120) -> int:
    """The job's task process, as submitit's local executor started it (what SLURM would signal)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        for proc in Path("/proc").iterdir():
            try:
                command = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"submitit.core._submit" in command and str(submitit_folder).encode() in b" ".join(command):
                return int(proc.name)
        time.sleep(0.05)
    raise AssertionError("no submitit task process")


def test_submitit_preemption_saves_requeues_and_the_job_resumes(tmp_path, reference_run):
    """The SLURM path, run by submitit's local executor: the preemption signal (SIGUSR2) reaches the
    job mid-training; runner saves last.pt, hands the signal to submitit, which requeues the job; the
    requeued job resumes in its own directory and ends bit-identical to an uninterrupted run."""
    sweep_dir = tmp_path / "sweep"
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "train", "-m", "hydra/launcher=submitit_local", *SLOW_RUN,
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    job_dir = sweep_dir / "000"  # job 0, the sweep varies nothing: named by its number only
    task = submitit_task_pid(sweep_dir / ".submitit", process)
    wait_for_checkpoint(job_dir, 8, process)
    os.kill(task, signal.SIGUSR2)
    _, err = process.communicate(timeout=240)
    assert process.returncode == 0, err
    log = (job_dir / "train.log").read_text()
    assert "stopped by SIGUSR2" in log and "Requeued job" in log, log
    assert "resumed from" in log and "last.pt" in log, log
    assert_same_run(job_dir, reference_run)
    assert "| ok |" in (sweep_dir / "summary.md").read_text()
