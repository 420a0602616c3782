"""Through the real CLI: a record that cannot be read never overwrites a result that can. Each run has
a timeout: a hang fails the test. That every reader's work is bounded by its file's size (shared values
in a checkpoint, YAML aliases in a run's records) and that the files which made tracebacks (odd job
folder names, event files that are not events, a tampered study, runner's resolvers given junk, a
``last.pt`` that is a folder, a forged seed) are answered in one line are hostile-input cases
(``tests/hostile_inputs/cases.py``, run by test_hostile_inputs.py)."""

import pytest
from conftest import TINY, job_dir, run_cli, snapshot
from hostile_files import alias_bomb_mapping

pytestmark = pytest.mark.slow  # real subprocesses: the command line and its exit are the point

SECONDS = 90  # a hang is 2**40 values walked; a refusal takes start-up time only


def test_a_continued_sweep_leaves_a_job_whose_record_is_damaged_for_a_look(tmp_path):
    """A finished job whose ``run.yaml`` was damaged got "failed" over its ok ``result.json`` (or hung
    on aliases); now it needs a look, and its result and checkpoints stay."""
    sweep = ("train", "-m", *TINY, "seed=0,2", "hydra.sweep.dir=sweep")
    assert run_cli(*sweep, cwd=tmp_path).returncode == 0
    jobs = [job_dir(tmp_path / "sweep", number) for number in (0, 1)]
    (jobs[0] / "run.yaml").write_text(alias_bomb_mapping())
    (jobs[1] / "run.yaml").write_bytes(b"\xff\xfe not text \x00")
    kept = {job: (snapshot(job / "checkpoints"), (job / "result.json").read_bytes()) for job in jobs}
    again = run_cli(*sweep, cwd=tmp_path, timeout=SECONDS)
    assert again.returncode == 0, again.stderr
    output = again.stdout + again.stderr
    assert "Traceback" not in output
    for job in jobs:
        assert f"needs a look: {job / 'run.yaml'} cannot be read" in output, output
        assert (snapshot(job / "checkpoints"), (job / "result.json").read_bytes()) == kept[job]
