"""``profile.steps`` against the run's own steps: the plan names the trace the run writes (steps past the
run's end or done before a resume are said, never promised); a new run whose steps all fall past its end,
and a run folder whose ``profile`` is a file or a link, are refused in one line before anything is
written."""

from conftest import TINY, train_refused


def plan_of(messages: list[str]) -> str:
    plan = next(message for message in messages if message.startswith("run plan"))
    return " ".join(plan.split())


def test_the_plan_names_the_trace_of_the_steps_the_run_takes(train_here, caplog):
    run_dir = train_here(*TINY, "profile.steps=[3,10]")  # TINY stops at step 4
    written = run_dir / "profile" / "steps_3-4.trace.json.gz"
    assert [path.name for path in (run_dir / "profile").iterdir()] == [written.name]
    plan = plan_of(caplog.messages)
    assert f"profile optimizer steps 3-4 -> {written}; open it" in plan, plan
    assert "of profile.steps=3-10, the others are not among this run's steps 1-4" in plan, plan
    assert "steps_3-10" not in plan


def test_a_resume_past_the_steps_says_that_it_records_nothing(train_here, caplog):
    run_dir = train_here(*TINY, "profile.steps=[2,3]", "checkpoint.every_n_steps=2")
    caplog.clear()
    train_here(*TINY, "profile.steps=[2,3]", "trainer.max_steps=6", "resume=auto", run_dir=run_dir)
    plan = plan_of(caplog.messages)
    assert (
        "profile optimizer steps 2-3: none of them is among this run's steps 5-6, nothing is recorded" in plan
    )
    assert [path.name for path in (run_dir / "profile").iterdir()] == ["steps_2-3.trace.json.gz"]


def test_a_new_run_whose_profile_steps_are_all_past_its_end_is_refused(tmp_path, monkeypatch, capsys):
    err = train_refused(tmp_path, monkeypatch, capsys, "profile.steps=[50,60]")
    assert err == (
        "profile.steps=[50, 60]: the run plans 4 optimizer steps, so step 50 is past its end and nothing "
        "would be recorded; profile.steps must be [first, last] with 1 <= first <= 4\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_profile_folder_that_is_a_file_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys):
    """(A link there is refused before, by the check of the run's folder.)"""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    profile = run_dir / "profile"
    profile.write_text("a user's notes")
    err = train_refused(tmp_path, monkeypatch, capsys, "profile.steps=[2,3]")
    assert err.startswith(f"profile.steps=[2, 3]: {profile}, where the run's traces go, is a file, not a "), (
        err
    )
    assert [path.name for path in run_dir.iterdir()] == ["profile"]
    assert profile.read_text() == "a user's notes"


def test_a_resume_from_before_the_steps_names_the_trace_it_takes_beside_the_first(train_here, caplog):
    """The steps recorded again take a name nothing holds (``take2``), and the plan says that name."""
    steps = ("profile.steps=[2,3]", "checkpoint.every_n_steps=1", "checkpoint.keep_last=10")
    run_dir = train_here(*TINY, *steps)
    caplog.clear()
    first = run_dir / "checkpoints" / "step_00000001.pt"
    train_here(*TINY, *steps, f"resume={first}", run_dir=run_dir)
    again = run_dir / "profile" / "steps_2-3.take2.trace.json.gz"
    assert again.is_file()
    assert f"profile optimizer steps 2-3 -> {again}; open it" in plan_of(caplog.messages)
