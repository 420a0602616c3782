"""A newcomer's two stumbles: a key misspelled inside a section gets the closest key, as an optimizer's
argument does; and an option only a project has, asked for from a folder with no project, says that no
project was found from there and where runner looked."""

import os
import sys

import pytest

from runner.cli.main import main


def refused(capsys, *overrides: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["train", *overrides])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.fixture
def no_project(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_PROJECT", "")  # restored after the test, as main() sets it in a project
    monkeypatch.delenv("RUNNER_PROJECT")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_misspelled_section_key_gets_did_you_mean(no_project, capsys):
    line = refused(capsys, "trainer.max_epoch=5")
    assert line.startswith(
        "runner: error: trainer.max_epoch=5: trainer has no key max_epoch; did you mean trainer.max_epochs? "
    )
    assert "its keys: max_steps, max_epochs" in line
    assert "did you mean" not in refused(capsys, "trainer.frobnicate=5")
    assert list(no_project.iterdir()) == []


def test_an_option_asked_for_outside_any_project_says_no_project_was_found(no_project, capsys):
    line = refused(capsys, "model=small_gru")
    assert line == (
        "runner: error: model=small_gru: no such option; model is one of char_rnn, char_transformer, cnn, "
        f"mlp; no project was found from {no_project} (runner looks for a pyproject.toml with [tool.runner] "
        "in the working folder and each folder above it)"
    )
    assert list(no_project.iterdir()) == []


def test_in_a_project_a_missing_option_names_the_options_only(no_project, capsys):
    (no_project / "conf").mkdir()
    (no_project / "pyproject.toml").write_text("[tool.runner]\n")
    line = refused(capsys, "model=small_gru")
    assert line.startswith("runner: error: model=small_gru: no such option; model is one of ")
    assert "no project was found" not in line
