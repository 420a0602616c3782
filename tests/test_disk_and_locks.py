"""Full disks, unwritable files, leftovers and races: each a one-line outcome that loses nothing.

The disk-full case runs on a real small filesystem (a 3 MiB tmpfs in a private mount namespace) where
this machine lets a test mount one; file size limits (``ulimit -f``: the kernel refuses writes past it
with EFBIG) make the same failures everywhere else, for checkpoints and for the event file.
"""

import errno
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import PLUGINS, TINY, event_files, read_scalars, run_cli

from runner.checkpoint.durable import WriteError, writing
from runner.experiment.lock import LOCK_FILE, RunDirBusy
from runner.experiment.train import NothingToTrain
from runner.observe.records import RESULT_FILE, write_result
from runner.tools.report import write_summary

ENV = {"PYTHONPATH": str(PLUGINS) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
# A printed resume command carries the PYTHONPATH the run was started with (outside a project).
RESUME = "PYTHONPATH=" + shlex.quote(os.pathsep.join(e for e in ENV["PYTHONPATH"].split(os.pathsep) if e))
LONG = ("trainer.max_steps=2000", "trainer.max_epochs=null", "trainer.log_every_n_steps=1")


def snapshot(run_dir: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """Every file under ``run_dir``: size and modification time (``skip``: top-level names Hydra writes)."""
    return {
        str(path.relative_to(run_dir)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(run_dir.rglob("*"))
        if path.is_file() and path.relative_to(run_dir).parts[0] not in skip
    }


def one_error_line(result: subprocess.CompletedProcess) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("runner: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def checkpoint_files(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").iterdir()) if (run_dir / "checkpoints").is_dir() else []


def loads(path: Path) -> dict:
    return torch.load(path, weights_only=True)


# In-process: the pieces, fast.


def test_a_refused_write_names_the_file_even_behind_torchs_runtime_error(tmp_path):
    """torch's writer reports ENOSPC as a RuntimeError raised while handling the OSError."""
    refused = pytest.raises(WriteError, match=r"cannot write .*best\.pt: No space left on device$")
    with refused, writing(tmp_path / "best.pt"):
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from None
    with pytest.raises(FileNotFoundError), writing(tmp_path / "x"):  # not a refused write: as it is
        raise FileNotFoundError(errno.ENOENT, "gone")


def test_result_json_is_written_atomically_and_report_skips_a_damaged_one(tmp_path, capsys):
    run_dir = tmp_path / "sweep" / "0"
    (run_dir / ".hydra").mkdir(parents=True)
    write_result(run_dir, "ok", 1.5, best=0.25)
    assert json.loads((run_dir / RESULT_FILE).read_text())["best"] == 0.25
    assert [path.name for path in run_dir.iterdir()] == [".hydra", RESULT_FILE]  # no temporary file left
    for name, content in (("1", ""), ("2", '{"status": '), ("3", "[1, 2]")):
        (tmp_path / "sweep" / name / ".hydra").mkdir(parents=True)
        (tmp_path / "sweep" / name / RESULT_FILE).write_text(content)
    runs = write_summary(tmp_path / "sweep")
    assert {run.name: run.status for run in runs} == {"0": "ok", "1": "incomplete", "2": "incomplete",
                                                      "3": "incomplete"}  # fmt: skip
    warnings = capsys.readouterr().err.splitlines()
    assert warnings[0] == f"runner: warning: skipping {tmp_path / 'sweep' / '1' / RESULT_FILE}: it is empty"
    assert len(warnings) == 3 and all(line.startswith("runner: warning: skipping ") for line in warnings)


def test_a_run_removes_the_temporary_files_an_interrupted_save_left(train_here, tmp_path):
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    stale = [folder / ".step_00000002.pt.4242.tmp", folder / ".best.pt.99.tmp"]
    kept = [folder / "notes.tmp", folder / ".hidden", tmp_path / "run" / ".run.yaml.77.tmp"]
    for path in stale + kept:
        path.write_bytes(b"half a checkpoint")
    train_here(*TINY, "checkpoint.every_n_steps=2")
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in kept)  # only that pattern, only in that folder
    assert (folder / "last.pt").exists()


def write_lock(run_dir: Path, pid: int, host: str | None = None, since: float | None = None, **more) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = {"pid": pid, "host": host or socket.gethostname(), "since": since or time.time(), **more}
    (run_dir / LOCK_FILE).write_text(json.dumps(holder))
    return run_dir / LOCK_FILE


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_live_lock_refuses_the_run_before_it_writes(train_here, tmp_path):
    run_dir = tmp_path / "run"
    lock = write_lock(run_dir, os.getppid())
    before = snapshot(run_dir)
    with pytest.raises(RunDirBusy, match=rf"{run_dir} is being written by pid {os.getppid()} on host "):
        train_here(*TINY, run_dir=run_dir)
    assert snapshot(run_dir) == before and lock.exists()


@pytest.mark.parametrize(
    "holder",
    [
        pytest.param(lambda: {"pid": dead_pid()}, id="dead process"),
        pytest.param(lambda: {"pid": os.getppid(), "since": 1.0}, id="pid reused since"),
        pytest.param(lambda: {"pid": os.getpid()}, id="this pid in an earlier life"),
        pytest.param(lambda: {"pid": 1, "host": "elsewhere", "job": "812"}, id="requeued job"),
    ],
)
def test_a_stale_lock_is_taken_over_with_a_warning(train_here, tmp_path, caplog, monkeypatch, holder):
    monkeypatch.setenv("SLURM_JOB_ID", "812")
    run_dir = tmp_path / "run"
    write_lock(run_dir, **holder())
    train_here(*TINY, run_dir=run_dir)
    assert "which is no longer running; taking it over" in caplog.text
    assert not (run_dir / LOCK_FILE).exists()  # released at the end
    assert (run_dir / "checkpoints" / "last.pt").exists()


def test_a_lock_of_another_host_or_an_unreadable_one_is_refused(train_here, tmp_path):
    run_dir = tmp_path / "run"
    write_lock(run_dir, 1, host="elsewhere", job="1")
    with pytest.raises(
        RunDirBusy, match=rf"pid 1 on host elsewhere .*; if that run is gone .*remove {run_dir}"
    ):
        train_here(*TINY, run_dir=run_dir)
    (run_dir / LOCK_FILE).write_text("")
    with pytest.raises(RunDirBusy, match=r"cannot be read; if no run is writing there, remove it"):
        train_here(*TINY, run_dir=run_dir)


def test_the_lock_is_released_when_the_run_fails(train_here, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(Exception, match="non-finite"):
        train_here(*TINY, "optimizer.lr=1e30", "clip=null", "model.dropout=0.0", run_dir=run_dir)
    assert not (run_dir / LOCK_FILE).exists()


def test_resuming_a_finished_run_trains_and_writes_nothing(train_here, tmp_path):
    run_dir = train_here(*TINY, "trainer.val_every_n_steps=2")
    before = snapshot(run_dir)
    last = run_dir / "checkpoints" / "last.pt"
    message = rf"nothing to train: {last} already reached step 4 of 4 \(trainer.max_steps=4\); raise trainer"
    with pytest.raises(NothingToTrain, match=message):
        train_here(*TINY, f"resume={run_dir}", run_dir=run_dir)
    with pytest.raises(NothingToTrain, match=r"already reached epoch 1 of 1 \(trainer.max_epochs=1\); raise"):
        train_here(
            *TINY, "trainer.max_steps=100", "trainer.max_epochs=1", f"resume={run_dir}", run_dir=run_dir
        )
    assert snapshot(run_dir) == before
    train_here(*TINY, "trainer.max_steps=6", f"resume={run_dir}", run_dir=run_dir)  # a longer run trains on
    assert loads(last)["global_step"] == 6


def test_resuming_a_run_early_stopping_ended_trains_only_with_other_callback_settings(train_here, tmp_path):
    stopping = (
        "callbacks=early_stopping",
        "callbacks.early_stopping.min_delta=100",
        "trainer.val_every_n_steps=1",
    )
    run_dir = train_here(*TINY, *stopping, "callbacks.early_stopping.patience=1", "trainer.max_steps=20")
    last = run_dir / "checkpoints" / "last.pt"
    assert loads(last)["global_step"] == 2
    before = snapshot(run_dir)
    with pytest.raises(NothingToTrain, match=rf"{last} was ended at step 2 by a callback \(early stopping: "):
        train_here(*TINY, *stopping, "callbacks.early_stopping.patience=1", "trainer.max_steps=30",
                   f"resume={run_dir}", run_dir=run_dir)  # fmt: skip
    assert snapshot(run_dir) == before
    train_here(*TINY, *stopping, "callbacks.early_stopping.patience=3", "trainer.max_steps=30",
               f"resume={run_dir}", run_dir=run_dir)  # fmt: skip
    assert loads(last)["global_step"] == 4  # two more validations without improvement


# Through the real CLI.


def run_limited(max_file_bytes: int, *arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m runner`` under ``ulimit -f``: the kernel refuses to grow any file past the limit
    (EFBIG; Python ignores SIGXFSZ)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "runner", *arguments], cwd=cwd, env={**os.environ, **ENV}, capture_output=True,
        text=True, timeout=240, preexec_fn=limit,
    )  # fmt: skip


@pytest.mark.slow
def test_a_checkpoint_the_disk_refuses_is_one_line_and_leaves_no_temporary_file(tmp_path, run_dir):
    """Checkpoints are ~78 KB; nothing may grow past 60 KB: the first save fails."""
    result = run_limited(60_000, "train", *LONG, "checkpoint.every_n_steps=20", f"hydra.run.dir={run_dir}",
                         cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = one_error_line(result)
    assert line == (
        f"runner: error: cannot write {run_dir / 'checkpoints' / 'step_00000020.pt'}: File too large; the "
        "last good checkpoint is none (start the run again once there is space)"
    )
    assert checkpoint_files(run_dir) == []  # no temporary file, no torn checkpoint
    assert not (run_dir / LOCK_FILE).exists()
    assert not (run_dir / RESULT_FILE).exists()


@pytest.mark.slow
def test_a_tensorboard_write_failure_stops_at_the_next_step_and_saves(tmp_path, run_dir):
    """Checkpoints fit under the limit; the event file (one event per step) outgrows it after ~450 steps."""
    result = run_limited(90_000, "train", *LONG, "checkpoint.every_n_steps=50", f"hydra.run.dir={run_dir}",
                         cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = one_error_line(result)
    last = run_dir / "checkpoints" / "last.pt"
    (events,) = event_files(run_dir)
    assert line == (
        f"runner: error: cannot write {events}: File too large; the last good checkpoint is {last} "
        f"(resume with: {RESUME} python -m runner train resume={run_dir} once there is space)"
    )
    stopped_at = loads(last)["global_step"]
    assert 300 < stopped_at < 1000  # at the step boundary after the failed write, not at the run's end
    logged = [step for step, _ in read_scalars(run_dir)["train/loss"]]  # the file ends in whole records
    assert logged == list(range(1, logged[-1] + 1)) and logged[-1] <= stopped_at
    assert stopped_at - logged[-1] <= 100  # a failed batch holds at most 50 steps (a save flushes the events)
    assert not (run_dir / LOCK_FILE).exists()

    resumed = run_cli(
        "train", f"resume={run_dir}", f"trainer.max_steps={stopped_at + 5}", cwd=tmp_path, env=ENV
    )
    assert resumed.returncode == 0, resumed.stderr
    assert loads(last)["global_step"] == stopped_at + 5


PRIVATE_MOUNTS = ["unshare", "--user", "--map-root-user", "--mount"]


def can_mount(tmp_path: Path) -> bool:
    """A tmpfs in a private mount namespace: as root, or as a user where user namespaces are allowed."""
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    return subprocess.run([*PRIVATE_MOUNTS, "mount", "-t", "tmpfs", "tmpfs", str(probe)]).returncode == 0


def run_script(script: str, tmp_path: Path, **variables: str) -> Path:
    """``script`` (bash) in a private mount namespace; what it leaves in ``$OUT`` is returned."""
    out = tmp_path / "out"
    out.mkdir()
    environment = {**os.environ, **ENV, "OUT": str(out), "PYTHON": sys.executable, **variables}
    subprocess.run([*PRIVATE_MOUNTS, "bash", "-c", "set -u\n" + script], cwd=tmp_path, env=environment,
                   check=True, timeout=480)  # fmt: skip
    return out


def completed(out: Path, name: str) -> subprocess.CompletedProcess:
    code = int((out / f"{name}.rc").read_text())
    return subprocess.CompletedProcess(
        [], code, (out / f"{name}.out").read_text(), (out / f"{name}.err").read_text()
    )


FULL_DISK = """
mount -t tmpfs -o size=3m tmpfs "$DISK"
head -c 2900000 /dev/zero > "$DISK/filler"
"$PYTHON" -m runner train $ARGUMENTS hydra.run.dir="$DISK/run" >"$OUT/full.out" 2>"$OUT/full.err"
echo $? >"$OUT/full.rc"
cp -a "$DISK/run" "$OUT/full_run"
rm "$DISK/filler"
"$PYTHON" -m runner train resume="$DISK/run" >"$OUT/resumed.out" 2>"$OUT/resumed.err"
echo $? >"$OUT/resumed.rc"
cp -a "$DISK/run" "$OUT/resumed_run"
"""


@pytest.mark.slow
def test_a_full_disk_is_one_line_keeps_the_checkpoints_and_resumes_once_there_is_space(tmp_path):
    """The issue's case: a 3 MiB filesystem with ~230 KB free, three checkpoints' worth."""
    if not can_mount(tmp_path):
        pytest.skip("cannot mount a small filesystem here (the ulimit tests cover refused writes)")
    disk = tmp_path / "disk"
    disk.mkdir()
    arguments = "trainer.max_steps=300 trainer.max_epochs=null checkpoint.every_n_steps=20"
    out = run_script(FULL_DISK, tmp_path, DISK=str(disk), ARGUMENTS=arguments)

    full = completed(out, "full")
    assert full.returncode == 2, full.stderr
    line = one_error_line(full)
    assert line.startswith(f"runner: error: cannot write {disk / 'run'}")
    assert ": No space left on device; the last good checkpoint is " in line
    resume = f"{RESUME} python -m runner train resume={disk / 'run'}"
    assert line.endswith(f"(resume with: {resume} once there is space)")
    named = Path(line.split("the last good checkpoint is ")[1].split(" (resume")[0])
    kept = checkpoint_files(out / "full_run")
    assert kept and all(path.name.startswith("step_") for path in kept)  # no temporary file, no torn one
    assert out / "full_run" / named.relative_to(disk / "run") in kept
    for path in kept:
        assert loads(path)["global_step"] > 0
    assert not (out / "full_run" / RESULT_FILE).exists() and not (out / "full_run" / LOCK_FILE).exists()

    resumed = completed(out, "resumed")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from     {named}" in resumed.stdout
    assert loads(out / "resumed_run" / "checkpoints" / "last.pt")["global_step"] == 300
    assert json.loads((out / "resumed_run" / RESULT_FILE).read_text())["status"] == "ok"


READ_ONLY_CHECKPOINTS = """
mkdir -p "$RUN/checkpoints"
mount -t tmpfs -o ro tmpfs "$RUN/checkpoints"
"$PYTHON" -m runner train $ARGUMENTS hydra.run.dir="$RUN" >"$OUT/train.out" 2>"$OUT/train.err"
echo $? >"$OUT/train.rc"
"""


@pytest.mark.slow
def test_a_read_only_checkpoint_folder_is_one_line(tmp_path, run_dir):
    if not can_mount(tmp_path):
        pytest.skip("cannot mount a read-only filesystem here")
    out = run_script(READ_ONLY_CHECKPOINTS, tmp_path, RUN=str(run_dir), ARGUMENTS=" ".join(TINY))
    result = completed(out, "train")
    assert result.returncode == 2, result.stderr
    assert one_error_line(result) == (
        f"runner: error: cannot write {run_dir / 'checkpoints' / 'best.pt'}: Read-only file system; the last "
        "good checkpoint is none (start the run again once it can be written)"
    )
    assert not (run_dir / LOCK_FILE).exists()


TARGET = "data.dataset._target_=slow_data.slow_classification"  # a resume names the plug-in's code again
SLOW = (
    "data=classification", TARGET,
    "+data.dataset.seconds_per_item=0.005", "data.dataset.num_train=100", "data.dataset.num_val=40",
    "data.batch_size=8", "trainer.max_steps=2000", "trainer.max_epochs=null", "checkpoint.every_n_steps=5",
)  # fmt: skip


def start_slow(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "train", *SLOW, *extra, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def wait_until(condition, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.slow
def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_ones_lock_is_taken_over(tmp_path):
    run_dir = tmp_path / "run"
    first = start_slow(run_dir, "resume=auto")
    wait_until(lambda: (run_dir / LOCK_FILE).exists() and checkpoint_files(run_dir), first)
    holder = f"{run_dir} is being written by pid {first.pid} on host {socket.gethostname()} (since "
    for second in (
        ("train", *SLOW, "resume=auto", f"hydra.run.dir={run_dir}"),
        ("train", f"resume={run_dir}", TARGET),
    ):
        result = run_cli(*second, cwd=tmp_path, env=ENV)
        assert result.returncode == 2, result.stderr
        assert one_error_line(result).startswith(f"runner: error: {holder}")
    assert first.poll() is None  # still training, undisturbed
    assert len(event_files(run_dir)) == 1

    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    assert first.returncode == 143
    assert not (run_dir / LOCK_FILE).exists()

    # SIGKILL leaves the lock (and perhaps a temporary file mid-save): the next run takes both over.
    killed = start_slow(run_dir, "resume=auto")
    wait_until(lambda: (run_dir / LOCK_FILE).exists(), killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert (run_dir / LOCK_FILE).exists()
    leftover = run_dir / "checkpoints" / f".step_00000005.pt.{killed.pid}.tmp"
    leftover.write_bytes(b"half a checkpoint")
    step = max(loads(path)["global_step"] for path in checkpoint_files(run_dir) if path.suffix == ".pt")
    resumed = run_cli(
        "train", f"resume={run_dir}", TARGET, f"trainer.max_steps={step + 3}", cwd=tmp_path, env=ENV
    )
    assert resumed.returncode == 0, resumed.stderr
    output = resumed.stdout + resumed.stderr
    assert f"pid {killed.pid} on host {socket.gethostname()}" in output
    assert "which is no longer running; taking it over" in output
    assert not leftover.exists() and not (run_dir / LOCK_FILE).exists()
    assert loads(run_dir / "checkpoints" / "last.pt")["global_step"] == step + 3


@pytest.mark.slow
def test_report_skips_an_empty_result_json_with_a_warning(tmp_path, run_dir, finished_run):
    shutil.copytree(finished_run, run_dir)  # the module's tiny run (TINY through the CLI), as this test's own
    (run_dir / RESULT_FILE).write_text("")  # what a full disk left before results were written atomically
    report = run_cli("report", str(run_dir), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert report.stderr.strip() == f"runner: warning: skipping {run_dir / RESULT_FILE}: it is empty"
    assert "incomplete" in (run_dir / "summary.md").read_text()


@pytest.mark.slow
def test_resuming_a_finished_run_says_so_exits_0_and_writes_nothing(tmp_path, run_dir, finished_run):
    shutil.copytree(finished_run, run_dir)  # the module's tiny run (TINY through the CLI), as this test's own
    before = snapshot(run_dir, skip=(".hydra", "train.log"))  # Hydra's own files: undone by the command line
    last = run_dir / "checkpoints" / "last.pt"
    for again in (
        ("train", f"resume={run_dir}"),
        ("train", *TINY, "resume=auto", f"hydra.run.dir={run_dir}"),
    ):
        resumed = run_cli(*again, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        output = resumed.stdout + resumed.stderr
        assert "Traceback" not in output
        assert (
            f"runner: nothing to train: {last} already reached step 4 of 4 (trainer.max_steps=4); raise "
            "trainer.max_steps to train longer"
        ) in output
        assert snapshot(run_dir, skip=(".hydra", "train.log")) == before


def take_lock(run_dir: Path, start, results, hold) -> None:
    from runner.experiment.lock import acquire

    start.wait()
    try:
        acquire(run_dir)
        results.put("got")
    except RunDirBusy:
        results.put("busy")
    hold.wait()  # both have tried before either lets go


def test_two_runs_that_find_one_stale_lock_do_not_both_take_it_over(tmp_path):
    """Before: each removed the stale lock, and the second removed the first one's new lock too (57 of
    100 tries ended with both runs writing)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for _ in range(10):
        (tmp_path / LOCK_FILE).write_text(
            json.dumps({"pid": 2**22 - 7, "host": socket.gethostname(), "since": 0})
        )
        start, hold, results = context.Barrier(2), context.Barrier(2), context.Queue()
        processes = [
            context.Process(target=take_lock, args=(tmp_path, start, results, hold)) for _ in range(2)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=60)
        assert sorted(results.get() for _ in processes) == ["busy", "got"]
        (tmp_path / LOCK_FILE).unlink(missing_ok=True)
