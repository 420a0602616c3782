"""``python -m runner train`` in this process (``main_train``, Hydra's real ``hydra.main``): the command
line read, Hydra's facts about each job handed to the job lifecycle, a sweep's summary written. The
subprocess tests (test_cli_*.py, test_sweeps.py) show what only a process shows; these keep the
command line in the quick lane."""

import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import TINY, job_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.cli.train import main_train
from runner.observe.records import recorded_result, write_run_record


def test_a_run_records_ok_and_hydras_record(tmp_path):
    run_dir = tmp_path / "run"
    main_train([*TINY, "seed=3", f"hydra.run.dir={run_dir}"])
    assert recorded_result(run_dir)["status"] == "ok"
    assert "seed=3" in yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    assert "started" not in (run_dir / "train.log").read_text()  # a single run has no job lines


def test_run_yaml_is_the_config_in_pyyamls_own_text(tmp_path):
    """run.yaml is written by libyaml where PyYAML has it: for a real run's config, the very text
    PyYAML's own writer gives."""
    run_dir = tmp_path / "run"
    main_train([*TINY, "seed=3", "optimizer.lr=0.0005", f"hydra.run.dir={run_dir}"])
    text = (run_dir / "run.yaml").read_text()
    recorded = yaml.safe_load(text)
    assert recorded["seed"] == 3 and recorded["optimizer"]["lr"] == 0.0005
    assert text == yaml.safe_dump(recorded, sort_keys=False)


# Any character, lone surrogates too (a non-UTF-8 byte of a path, as Python decodes it).
TEXT = st.text(st.characters(exclude_categories=()))
LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT


def nested(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4)


VALUES = st.recursive(LEAF, nested, max_leaves=20)
KEYS = st.text(st.characters(exclude_categories=()), min_size=1).filter(lambda key: key != "runtime")


@settings(max_examples=150, deadline=None)
@given(config=st.dictionaries(KEYS, VALUES, max_size=6), runtime=st.dictionaries(KEYS, VALUES, max_size=3))
def test_run_yaml_reads_back_as_what_was_written(config, runtime):
    """Any keys and values a config holds (odd characters, long keys, nesting) read back the same."""
    with tempfile.TemporaryDirectory() as folder:
        write_run_record(Path(folder), config, runtime)
        assert yaml.safe_load((Path(folder) / "run.yaml").read_text()) == {**config, "runtime": runtime}


def test_a_refused_value_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main_train([*TINY, "optimizer.lr=-1", f"hydra.run.dir={tmp_path / 'run'}"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("runner: error: optimizer.lr=-1") and error.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_run_the_task_refuses_leaves_no_run_directory(tmp_path, capsys, monkeypatch):
    """Refused once Hydra has composed and made the run directory (a value only the composed config
    shows): one line, exit 2, and what Hydra wrote is removed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNNER_TEST_UNSET", raising=False)
    with pytest.raises(SystemExit) as exited:
        main_train([*TINY, "trainer.max_steps=${oc.env:RUNNER_TEST_UNSET}", "hydra.run.dir=outputs/run"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("runner: error: ")
    assert list(tmp_path.iterdir()) == []


def job_lines(output: str, kind: str) -> list[str]:
    """The sweep's console lines of one kind (``started``, ``ok``), as ``[job N] ...``: Hydra's console
    handler writes them to stdout."""
    return [
        line.split(" - ", 1)[1] for line in output.splitlines() if f"] {kind}" in line and " - [job " in line
    ]


def test_a_sweep_runs_each_job_in_turn_and_writes_its_summary(tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    main_train(["-m", *TINY, "seed=1,2", f"hydra.sweep.dir={sweep_dir}"])
    assert [recorded_result(job_dir(sweep_dir, job))["status"] for job in (0, 1)] == ["ok", "ok"]
    assert (sweep_dir / "summary.csv").read_text().count("\n") == 3  # a header and two jobs
    output = capsys.readouterr().out
    assert job_lines(output, "started") == ["[job 0] started: seed=1", "[job 1] started: seed=2"]
    assert output.count("Launching 2 jobs locally") == 1 and " : " not in output  # Hydra's #N line


def test_a_sweep_callback_named_by_its_path_before_cli_hydra_still_summarises(tmp_path):
    """A config written when the Hydra callbacks sat at cli/'s top (``runner.cli.sweep_summary``, which
    these docs once told users to name) still gets its callback."""
    sweep_dir = tmp_path / "sweep"
    old_path = "hydra.callbacks.sweep_summary._target_=runner.cli.sweep_summary.SweepSummary"
    main_train(["-m", *TINY, "seed=1", old_path, f"hydra.sweep.dir={sweep_dir}"])
    assert (sweep_dir / "summary.csv").read_text().count("\n") == 2  # a header and the job


def test_the_same_sweep_run_again_runs_no_job_twice(tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    arguments = ["-m", *TINY, "seed=1,2", f"hydra.sweep.dir={sweep_dir}"]
    main_train(arguments)
    results = [(job_dir(sweep_dir, job) / "result.json").read_bytes() for job in (0, 1)]
    assert len(job_lines(capsys.readouterr().out, "started")) == 2
    main_train(arguments)
    assert [(job_dir(sweep_dir, job) / "result.json").read_bytes() for job in (0, 1)] == results
    output = capsys.readouterr()
    assert job_lines(output.out, "started") == []
    assert "[job 0] ok in an earlier run of this sweep (best val/loss" in output.out + output.err


def test_a_resume_continues_the_run_in_its_own_directory_with_its_own_settings(tmp_path):
    """``resume=DIR``: the run's recorded command line applied again (its seed), the new limit taken."""
    run_dir = tmp_path / "run"
    main_train([*TINY, "seed=3", f"hydra.run.dir={run_dir}"])
    main_train([f"resume={run_dir}", "trainer.max_steps=6"])
    recorded = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert recorded["seed"] == 3 and recorded["trainer"]["max_steps"] == 6
    assert recorded_result(run_dir)["status"] == "ok"
    assert len(list((run_dir / ".hydra").glob("resume-*"))) == 1


def test_an_override_naming_a_missing_key_is_one_line_also_in_a_list(tmp_path, capsys, monkeypatch):
    """Hydra builds runner's callbacks from the command line's overrides: one that holds an
    interpolation stays text there, and the run's own check names the key it cannot resolve."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main_train([*TINY, "model.hidden=[64,${oops}]", "hydra.run.dir=outputs/run"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "runner: error: model.hidden[1]: Interpolation key 'oops' not found\n"
    assert list(tmp_path.iterdir()) == []
