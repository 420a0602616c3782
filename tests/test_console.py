"""What a person sees: the console (a progress bar on a terminal, a sweep's one line per job at its
start and end) and the run's train.log (everything the run printed, bar or not)."""

import fcntl
import io
import logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
from conftest import REPO, TINY, job_dir, read_scalars, run_cli

from runner.observe.console import OneLinePerJob, job_ended, job_started, sweep_job_console
from runner.observe.progress import Progress, RateWindow

PROGRESS_LINE = re.compile(r"epoch \d+ step \d+ \| train/loss \S+ \| val/loss \S+")


def test_the_rate_is_smoothed_over_the_last_seconds():
    window = RateWindow(now=0.0, step=0, seconds=10.0)
    # 1 s intervals of 10 steps and 100 samples; every 4th also validates and takes 3 s.
    now = 0.0
    for step in range(10, 210, 10):
        now += 3.0 if step % 40 == 0 else 1.0
        window.add(now, step, 100.0)
    span = window.points[-1][0] - window.points[0][0]
    assert 10.0 <= span < 13.0  # the last ~10 s, not the whole run, not one interval
    steps = window.points[-1][1] - window.points[0][1]
    assert window.steps_per_sec() == pytest.approx(steps / span)
    assert window.samples_per_sec() == pytest.approx(10 * steps / span)
    # A change of speed shows in full once the window has moved past it.
    for _ in range(11):
        now += 1.0
        step += 40
        window.add(now, step, 400.0)
    assert window.samples_per_sec() == pytest.approx(400.0)


def test_the_bar_shows_samples_per_second_and_an_eta_for_this_process_after_a_resume():
    """Resumed at step 500 of 1000: 50 steps in 5 s here is 10 steps/s, 45 s left (a count from
    step 0, 550 steps in 5 s, would say 4 s)."""
    clock = iter([0.0, 5.0]).__next__
    shown = io.StringIO()
    progress = Progress(1000, initial_step=500, file=shown, clock=clock)
    progress.update(550, {"train/loss": 0.25, "train/lr": 1e-3, "vitals/samples_per_sec": 320.0})
    bar = shown.getvalue().split("\r")[-1]
    assert "550/1000" in bar
    assert "eta 00:45" in bar
    assert "320 samples/s" in bar
    progress.close()


@pytest.fixture
def hydra_like_logging(tmp_path, monkeypatch):
    """The root logger as Hydra's default job logging sets it: a console handler and train.log."""
    console = io.StringIO()
    handlers = [logging.StreamHandler(console), logging.FileHandler(tmp_path / "train.log")]
    for handler in handlers:
        handler.setFormatter(logging.Formatter("[%(name)s][%(levelname)s] - %(message)s"))
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", handlers)
    level = root.level
    root.setLevel(logging.INFO)  # through setLevel: it clears the loggers' cached level checks
    yield console, tmp_path / "train.log"
    root.setLevel(level)
    handlers[1].close()


def test_a_sweep_job_shows_its_start_end_and_warnings_marked_with_its_number(hydra_like_logging):
    console, train_log = hydra_like_logging
    log = logging.getLogger("runner")
    with sweep_job_console(3, bar=False):
        job_started("optimizer.lr=0.01")
        log.info("run plan\n  device cpu")
        log.info("epoch 1 step 45 | train/loss 2.046 | val/loss 1.992")
        log.warning("a warning the person must see")
        job_ended("ok", 12.34, "best val/loss 1.992")
    log.info("sweep summary")  # after the job: the console is as before
    assert console.getvalue().splitlines() == [
        "[runner][INFO] - [job 3] started: optimizer.lr=0.01",
        "[runner][WARNING] - [job 3] a warning the person must see",
        "[runner][INFO] - [job 3] ok in 12.3 s: best val/loss 1.992",
        "[runner][INFO] - sweep summary",
    ]
    written = train_log.read_text()
    assert "run plan\n  device cpu" in written
    assert "epoch 1 step 45 | train/loss 2.046" in written
    assert "[runner][INFO] - ok in 12.3 s: best val/loss 1.992" in written


def on_a_terminal(*arguments: str, cwd) -> str:
    """``python -m runner ...`` with stdout and stderr on a pseudo-terminal 100 columns wide, as a
    person runs it; returns what the terminal received."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", *arguments], cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=follower, stderr=follower, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    os.close(follower)
    received = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process has ended and closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(leader)
    assert process.wait(timeout=240) == 0, received.decode(errors="replace")
    return received.decode()


@pytest.mark.slow
def test_train_log_holds_the_progress_lines_when_the_run_has_a_terminal(tmp_path):
    run_dir = tmp_path / "run"
    shown = on_a_terminal(
        "train", *TINY, "trainer.max_steps=12", "trainer.val_every_n_steps=4", f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )  # fmt: skip
    logged = (run_dir / "train.log").read_text()
    lines = [line for line in logged.splitlines() if PROGRESS_LINE.search(line)]
    assert len(lines) == 3  # steps 4, 8, 12
    for line in lines:
        assert shown.count(line) == 1  # on the console once, not twice
        # Above the bar: it was cleared (carriage return) before the line, and drawn again after it.
        before, after = shown.split(line)
        assert before.endswith("\r") or before.endswith("\r\n")
        assert "|" in after.split("\r\n", 1)[1]
    final_bar = re.findall(r"\d+%\|[^\r\n]*", shown)[-1]
    assert "12/12" in final_bar and re.search(r"\d samples/s", final_bar)
    assert "samples/s" not in logged and "%|" not in logged  # the bar only on the terminal


def sweep_output(result) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if "[runner]" in line]


@pytest.mark.slow
def test_a_sweep_prints_one_line_per_job_at_its_start_and_end_and_its_plan_to_train_log(tmp_path):
    result = run_cli("train", "-m", *TINY, "optimizer.lr=0.001,0.01", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    messages = [line.split(" - ", 1)[1] for line in sweep_output(result)]
    assert len(messages) == 4
    assert messages[0] == "[job 0] started: optimizer.lr=0.001"
    assert re.fullmatch(r"\[job 0\] ok in \d+\.\d s: best val/loss \d\.\d+", messages[1])
    assert messages[2] == "[job 1] started: optimizer.lr=0.01"
    assert re.fullmatch(r"\[job 1\] ok in \d+\.\d s: best val/loss \d\.\d+", messages[3])
    assert "run plan" not in result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "#0 : " not in output and "#1 : " not in output  # Hydra's start lines: runner's say it
    assert output.count("Launching 2 jobs locally") == 1
    (sweep,) = (tmp_path / "outputs" / "multirun").glob("*/*")
    for job in (0, 1):
        logged = (job_dir(sweep, job) / "train.log").read_text()
        assert "run plan" in logged and PROGRESS_LINE.search(logged)


@pytest.mark.slow
def test_lines_of_jobs_run_in_parallel_carry_their_job_number(tmp_path):
    plugins = str(REPO / "tests" / "plugins")
    result = run_cli(
        "train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY,
        "data.dataset._target_=slow_data.failing_classification", "+data.dataset.fail=false,true",
        cwd=tmp_path, env={"PYTHONPATH": plugins + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert result.returncode == 1  # a job failed
    lines = sweep_output(result)
    assert len(lines) == 4 and all(re.search(r"\[runner\]\[\w+\] - \[job [01]\] ", line) for line in lines)
    assert any("[job 0] started: +data.dataset.fail=False" in line for line in lines)
    assert any("[job 0] ok in" in line for line in lines)
    (failed,) = [line for line in lines if "[job 1] failed in" in line]
    assert "RuntimeError: deliberate failure for the test (traceback in outputs/multirun/" in failed
    assert "Traceback" not in result.stdout + result.stderr  # it is in the job's train.log


def test_hydras_launcher_says_launching_once_and_leaves_each_jobs_start_to_runner():
    """A search launches its trials one at a time: Hydra would say "Launching 1 jobs locally" and
    ``#N : every override`` before each; runner's ``[job N] started`` line names the job."""
    lines = OneLinePerJob()

    def shown(message: str) -> bool:
        return lines.filter(logging.LogRecord("hydra", logging.INFO, __file__, 0, message, None, None))

    said = [message for message in ["Launching 1 jobs locally", "\t#0 : optimizer.lr=0.01 data=digits",
            "Launching 1 jobs locally", "\t#1 : optimizer.lr=0.02 data=digits", "Optuna search: 2 trials"]
            if shown(message)]  # fmt: skip
    assert said == ["Launching 1 jobs locally", "Optuna search: 2 trials"]


def test_a_validation_line_shows_the_train_loss_of_its_own_step_or_none(train_here, caplog):
    """Logged every 3 steps, validated every 2: the lines at steps 2 and 4 have no train loss (the one
    logged at step 3 would read as step 4's); at step 6 both were logged."""
    run_dir = train_here(*TINY, "trainer.max_steps=6", "trainer.log_every_n_steps=3",
                         "trainer.val_every_n_steps=2", "data.dataset.num_train=160")  # fmt: skip
    lines = {int(found[1]): found[0] for found in re.finditer(r"epoch \d+ step (\d+) \|.*", caplog.text)}
    assert sorted(lines) == [2, 4, 6]
    assert "train/loss" not in lines[2] and "train/loss" not in lines[4]
    logged = dict(read_scalars(run_dir)["train/loss"])
    assert f"train/loss {logged[6]:.4g} | val/loss" in lines[6]
