"""profile.steps: a Perfetto trace of those steps with runner's phases named; nothing when off."""

import gzip
import json

import pytest
from conftest import TINY, composed

from runner.config.errors import ConfigError
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
    assert (run_dir / "profile" / "steps_3-10.trace.json.gz").stat().st_size > 0


def test_off_by_default_the_phases_are_one_shared_no_op(train_here):
    run_dir = train_here(*TINY)
    assert not (run_dir / "profile").exists()
    assert phases.phase("forward") is phases.NOTHING


@pytest.mark.parametrize("steps", ["[7,5]", "[0,2]", "[3]"])
def test_profile_steps_out_of_order_or_not_a_pair_is_refused_by_name(steps):
    with pytest.raises(ConfigError, match=r"^profile\.steps=.* is not allowed; profile\.steps must be two "):
        composed(f"profile.steps={steps}")
