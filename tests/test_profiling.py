"""profile.steps: a Perfetto trace of those steps with runner's phases named; nothing when off."""

import gzip
import json
from pathlib import Path

import pytest
import torch
from conftest import TINY, composed
from test_one_line_errors import run_limited

from runner.config.errors import ConfigError
from runner.experiment.profiling import OPEN_TRACE
from runner.training import phases

PHASES = {"data", "forward", "backward", "optimizer", "logging", "checkpoint", "validation"}


def test_profile_steps_writes_a_trace_whose_events_name_runners_phases(train_here, caplog):
    run_dir = train_here(*TINY, "profile.steps=[2,3]", "trainer.val_every_n_steps=3")
    trace = run_dir / "profile" / "steps_2-3.trace.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    names = {event["name"] for event in events if event.get("cat") == "user_annotation"}
    assert names >= PHASES
    # Two steps: one forward, backward and optimizer range each.
    assert sum(event.get("name") == "forward" for event in events if event.get("ph") == "X") == 2
    assert not list((run_dir / "profile").glob("*partial*"))
    plan = next(message for message in caplog.messages if message.startswith("run plan"))
    assert f"{trace}; open it" in plan.replace("\n", " ").replace("  ", "")
    assert any(str(trace) in message and "ui.perfetto.dev" in message for message in caplog.messages[1:])
    assert not phases.is_recording()


def test_a_profile_past_the_runs_end_is_written_with_the_steps_it_has(train_here):
    run_dir = train_here(*TINY, "profile.steps=[3,10]")  # TINY stops at step 4
    assert [path.name for path in (run_dir / "profile").iterdir()] == ["steps_3-4.trace.json.gz"]
    assert forwards(run_dir / "profile" / "steps_3-4.trace.json.gz") == 2


def forwards(trace: Path) -> int:
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return sum(event.get("name") == "forward" for event in events if event.get("ph") == "X")


def test_a_run_stopped_inside_the_steps_and_resumed_keeps_both_parts_never_over_a_file_or_a_link(
    train_here, tmp_path, caplog
):
    """The first part records steps 2-3 and stops; the resume records 4-5 into a trace of its own. A
    file and a link planted where the resume writes (its trace's name, the old partial name) are left
    as they are, and what a link points to is not written: the trace takes a name nothing holds."""
    run_dir = tmp_path / "run"
    train_here(*TINY, "profile.steps=[2,5]", "trainer.max_steps=3", run_dir=run_dir)
    profile = run_dir / "profile"
    first = (profile / "steps_2-3.trace.json.gz").read_bytes()
    assert forwards(profile / "steps_2-3.trace.json.gz") == 2
    outside = tmp_path / "outside"
    (profile / "steps_4-5.trace.json.gz").symlink_to(outside)
    (profile / "steps_4-5.partial.trace.json.gz").symlink_to(outside)
    (profile / "steps_4-5.take2.trace.json.gz").write_bytes(b"someone's own")
    caplog.clear()
    train_here(*TINY, "profile.steps=[2,5]", "trainer.max_steps=6", "resume=auto", run_dir=run_dir)
    assert not outside.exists()
    assert (profile / "steps_2-3.trace.json.gz").read_bytes() == first
    assert (profile / "steps_4-5.take2.trace.json.gz").read_bytes() == b"someone's own"
    assert forwards(profile / "steps_4-5.take3.trace.json.gz") == 2
    assert sorted(path.name for path in profile.iterdir()) == [
        "steps_2-3.trace.json.gz", "steps_4-5.partial.trace.json.gz", "steps_4-5.take2.trace.json.gz",
        "steps_4-5.take3.trace.json.gz", "steps_4-5.trace.json.gz",
    ]  # fmt: skip
    said = [message for message in caplog.messages if message.startswith("profile: ")]
    assert said == [
        f"profile: steps 4-5 recorded in {profile / 'steps_4-5.take3.trace.json.gz'}; {OPEN_TRACE}"
    ]


@pytest.mark.slow
def test_a_full_disk_while_the_trace_is_written_leaves_no_file_says_one_line_and_the_run_goes_on(tmp_path):
    """``ulimit -f`` (the kernel refuses to grow a file past it, as a full disk does) between the
    checkpoints' size and the trace's: the trace is lost, in one line, and the run ends as usual."""
    run_dir = tmp_path / "run"
    ran = run_limited(100_000, "train", *TINY, "trainer.max_steps=12", "profile.steps=[1,12]",
                      f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output
    trace = run_dir / "profile" / "steps_1-12.trace.json.gz"
    said = [line for line in output.splitlines() if "profile: " in line]
    assert len(said) == 1 and said[0].endswith(
        f"profile: the trace of steps 1-12 is not kept: cannot write {trace}: File too large; the run goes on"
    ), said
    assert list((run_dir / "profile").iterdir()) == []
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["global_step"] == 12


def test_off_by_default_the_phases_are_one_shared_no_op(train_here):
    run_dir = train_here(*TINY)
    assert not (run_dir / "profile").exists()
    assert phases.phase("forward") is phases.NOTHING


@pytest.mark.parametrize("steps", ["[7,5]", "[0,2]", "[3]"])
def test_profile_steps_out_of_order_or_not_a_pair_is_refused_by_name(steps):
    with pytest.raises(ConfigError, match=r"^profile\.steps=.* is not allowed; profile\.steps must be two "):
        composed(f"profile.steps={steps}")
