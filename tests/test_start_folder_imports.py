"""No module is imported from the folder runner is started in or reads: the start folder is on the import
path only where PYTHONPATH names it, and ``report`` in a downloaded sweep imports nothing from it."""

import os

import pytest
from conftest import run_cli

from runner.cli.processes.start_folder import protect_sys_path


def test_the_start_folder_is_on_the_path_only_where_pythonpath_names_it(tmp_path, monkeypatch):
    """A project's own folder too is taken off: its code folder goes on the path later, checked, and only
    for the commands that build the user's code (tests/test_project_discovery.py)."""
    monkeypatch.chdir(tmp_path)
    start = os.path.realpath(tmp_path)
    for pyproject, pythonpath, kept in (
        (None, "", False),
        ("[project]\nname = 'x'\n", "", False),
        ("not toml [", "", False),
        ("[tool.runner]\n", "", False),
        (None, f"/elsewhere{os.pathsep}{tmp_path}", True),
    ):
        (tmp_path / "pyproject.toml").unlink(missing_ok=True)
        if pyproject is not None:
            (tmp_path / "pyproject.toml").write_text(pyproject)
        path = [start, "/site-packages"]
        protect_sys_path(path, {"PYTHONPATH": pythonpath})
        assert path == ([start] if kept else []) + ["/site-packages"], (pyproject, pythonpath)
    path = ["/site-packages"]  # python -P: nothing to remove
    protect_sys_path(path, {})
    assert path == ["/site-packages"]


@pytest.mark.slow  # python -m's own sys.path is the point
def test_report_in_a_downloaded_sweep_imports_nothing_from_it(finished, tmp_path):
    for name in ("matplotlib", "tomllib", "yaml"):
        (finished / f"{name}.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write({name!r})\n")
    result = run_cli("report", ".", cwd=finished)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "ran").exists()
