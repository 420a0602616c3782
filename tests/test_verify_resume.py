"""``python -m runner verify-resume``: through the real CLI, on a setup that resumes exactly and on one
whose model keeps a count outside its state_dict (``tests/plugins/counting_model.py``)."""

import pytest
import torch
from conftest import PLUGINS, run_cli

from runner.cli.main import main
from runner.tools.verify_resume import first_state_difference

SETUP = ("data=classification", "data.dataset.num_train=64", "data.batch_size=16")


@pytest.mark.slow
def test_verify_resume_tells_a_setup_that_resumes_exactly_from_one_that_does_not(tmp_path):
    env = {"PYTHONPATH": str(PLUGINS)}  # the user's own project: their code on the path
    exact = run_cli("verify-resume", "--steps", "5", *SETUP, cwd=tmp_path, env=env, timeout=400)
    assert exact.returncode == 0, exact.stderr[-3000:]
    assert exact.stdout.startswith("resumes exactly: 5 steps uninterrupted, and killed (SIGKILL) at step")
    counting_model = "model._target_=counting_model.CountsOutsideStateDict"
    counting = run_cli(
        "verify-resume",
        "--steps=5",
        "--kill-at=3",
        *SETUP,
        counting_model,
        cwd=tmp_path,
        env=env,
        timeout=400,
    )
    assert counting.returncode == 1, counting.stderr[-3000:]
    lines = counting.stderr.splitlines()
    assert lines[0].startswith("runner: verify-resume: does not resume exactly: 5 steps uninterrupted, and "
                               "killed (SIGKILL) at step 3 then resumed from step 2")  # fmt: skip
    assert lines[1].startswith("  first differing loss: step ")
    assert lines[2] == "  first differing state: model_state_dict['body.1.weight']"
    assert "state outside state_dict" in lines[3] and "unseeded" in lines[3]


@pytest.mark.slow
def test_verify_resume_under_torchrun(tmp_path):
    """--nproc-per-node 2: both runs under real torchrun, the kill and the resume included."""
    env = {"PYTHONPATH": str(PLUGINS)}
    verified = run_cli("verify-resume", "--nproc-per-node", "2", "--steps", "3", "--kill-at", "2", *SETUP,
                       cwd=tmp_path, env=env, timeout=400)  # fmt: skip
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert verified.stdout.startswith(
        "resumes exactly: 3 steps uninterrupted, and killed (SIGKILL) at step 2 then resumed from step 1"
    )


def test_the_first_differing_state_is_named_where_the_run_stands_first_then_by_its_path():
    saved = {"global_step": 4, "model_state_dict": {"w": torch.tensor([1.0, float("nan")])},
             "rng_states": {"torch": torch.tensor([1, 2], dtype=torch.uint8)}, "checksum": "a"}  # fmt: skip
    same = {**saved, "checksum": "b", "model_state_dict": {"w": torch.tensor([1.0, float("nan")])}}
    assert first_state_difference(saved, same) is None  # NaN equals NaN; the checksum is not state
    moved = {**saved, "rng_states": {"torch": torch.tensor([1, 3], dtype=torch.uint8)}}
    assert first_state_difference(saved, moved) == "rng_states['torch']"
    assert first_state_difference(saved, {**moved, "global_step": 3}) == "global_step"


def test_bad_flags_are_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["verify-resume", "--steps", "2"])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and error.count("\n") == 1 and "--steps is at least 3" in error, error
