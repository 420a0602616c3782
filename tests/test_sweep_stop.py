"""What a sweep says when a signal stops it, or comes after its last job: in-process, no signal sent
(tests/test_sweeps.py sends real ones)."""

import signal

import pytest

from runner.cli.train import SweepStop


@pytest.mark.parametrize("failed", [False, True])
def test_a_signal_after_the_last_job_ended_says_the_sweep_finished(capsys, failed):
    """Ctrl-C while the summary is written (every job has ended): nothing was stopped. The sweep
    exits as it would have: 0, or 1 where a job failed (the summary's exit)."""
    stop = SweepStop(["seed"], signal_number=signal.SIGINT)
    with pytest.raises(SystemExit) as exited:
        stop.report(1 if failed else None)
    assert exited.value.code == (1 if failed else 0)
    message = capsys.readouterr().err
    assert message.startswith("runner: SIGINT received after the last job had ended: the sweep finished")
    assert "stopped" not in message


def test_a_signal_that_kept_jobs_from_running_says_which(capsys):
    stop = SweepStop(["seed"], signal_number=signal.SIGINT, sweep_dir="outputs/multirun/x")
    stop.skip(2, ["seed=3", "trainer.max_steps=4"])
    with pytest.raises(SystemExit) as exited:
        stop.report()
    assert exited.value.code == 128 + signal.SIGINT
    message = capsys.readouterr().err
    assert "the sweep was stopped by SIGINT" in message and "jobs not run: 2 (seed=3)" in message
