"""``runner init NAME``: the name goes into pyproject.toml, a docstring and the README as it is, so only a
name a project may have (PEP 508's, whose package is an identifier) writes one; any other (a quote, a
newline, triple quotes, a space) is one line naming what a name may be, nothing written. ``init`` inside a
run's folder (where runner would never find the project) is one line too."""

import ast
import importlib
import sys

import pytest
import tomllib
import torch
from conftest import TINY

from runner.cli.main import main

ALLOWED = (
    "a project's name is its package's name too: ASCII letters, digits, - _ and ., starting with a letter"
)


def refused(tmp_path, monkeypatch, capsys, arguments: list[str]) -> str:
    monkeypatch.chdir(tmp_path)
    before = sorted(path.name for path in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exited:
        main(["init", *arguments])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("runner: error: init "), err
    assert sorted(path.name for path in tmp_path.rglob("*")) == before
    return err


@pytest.mark.parametrize(
    "name",
    ["lab'x", 'lab"x', "lab\nx", 'lab"""x', "lab'''x", "my lab", "lab-", "2lab", "lab\\x", "läb", "lab}x"],
)
def test_a_name_a_project_cannot_have_is_refused_in_one_line_naming_what_a_name_may_be(
    tmp_path, monkeypatch, capsys, name
):
    err = refused(tmp_path, monkeypatch, capsys, [name])
    assert ALLOWED in err, err
    assert f"init {name if name.isprintable() else repr(name)}: " in err


@pytest.mark.parametrize("name", ["My.Lab-2", "lab_x", "a"])
def test_a_name_with_the_marks_a_project_may_have_writes_a_project_that_parses(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert main(["init", name]) is None
    folder = tmp_path / name
    package = name.replace("-", "_").replace(".", "_").lower()
    assert tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"] == name
    assert (folder / "src" / package / "models.py").is_file()
    for path in folder.rglob("*.py"):
        ast.parse(path.read_text(), str(path))
    monkeypatch.syspath_prepend(str(folder / "src"))
    try:
        models = importlib.import_module(f"{package}.models")
        assert importlib.import_module(package).__doc__.startswith(f"{name}: ")
        assert models.TwoLayerNet([2], 2)(torch.zeros(1, 2)).shape == (1, 2)
    finally:
        for module in [module for module in sys.modules if module.split(".")[0] == package]:
            del sys.modules[module]


def test_init_inside_a_run_folder_is_refused_in_one_line(train_here, tmp_path, monkeypatch, capsys):
    """A run's folder is data, never a project: the project would not be found there."""
    run_dir = train_here(*TINY, "trainer.max_steps=1", "checkpoint=none")
    err = refused(tmp_path, monkeypatch, capsys, [str(run_dir / "lab")])
    assert (
        f"{run_dir} holds a run (runner wrote a run there), and a run's folder is data, never a project"
        in err
    )
    (run_dir / "notes").mkdir()
    refused(run_dir / "notes", monkeypatch, capsys, ["."])
