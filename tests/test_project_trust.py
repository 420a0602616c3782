"""A project found above the working folder runs its code only when it is the user's own (as git's
``safe.directory``): a ``pyproject.toml`` planted in a folder others may write (a shared ``/tmp``) or
that belongs to another user is refused in one line before anything it names runs; and a code folder
holding a file Python's ``site`` runs at every start (``sitecustomize.py``, a ``.pth``) is refused."""

import os
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from runner.cli.main import main
from runner.config.errors import ConfigError
from runner.config.project import find_project

PLANTED = "import pathlib\npathlib.Path({marker!r}).touch()\n"


def planted_project(root: Path, marker: Path) -> Path:
    """A project whose default model is ``pathlib.Path.touch`` on ``marker`` and whose code folder holds
    a ``sitecustomize.py`` that touches ``marker`` too; the working folder below it."""
    (root / "conf" / "model").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "pyproject.toml").write_text('[tool.runner]\ndefaults = {model = "touch"}\n')
    (root / "conf" / "model" / "touch.yaml").write_text(f"_target_: pathlib.Path.touch\n_args_: [{marker}]\n")
    (root / "src" / "sitecustomize.py").write_text(PLANTED.format(marker=str(marker)))
    work = root / "work"
    work.mkdir()
    return work


def refused_train(work: Path, capsys, monkeypatch, *overrides: str) -> str:
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as exited:
        main(["train", "trainer.max_steps=1", *overrides])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error


@pytest.fixture(autouse=True)
def _no_project_named(monkeypatch):
    for name in ("RUNNER_PROJECT", "RUNNER_TRUSTED_PROJECTS"):
        monkeypatch.setenv(name, "")  # restored after the test: main() sets RUNNER_PROJECT in a project
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_project_in_a_folder_every_user_may_write_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    marker = tmp_path / "touched"
    work = planted_project(shared, marker)
    shared.chmod(0o777)
    error = refused_train(work, capsys, monkeypatch)
    assert error == (
        f"runner: error: {shared / 'pyproject.toml'}: not trusted as your project, found above {work}: "
        f"{shared} is writable by every user; if it is yours, run runner from {shared}, or trust it with "
        f"export RUNNER_TRUSTED_PROJECTS={shared}\n"
    )
    assert not marker.exists() and sorted(os.listdir(work)) == []


@pytest.mark.parametrize("what", ["pyproject.toml", "conf", "src", "conf/model", "conf/model/touch.yaml"])
def test_a_project_whose_file_or_folders_others_may_write_is_refused(tmp_path, what):
    work = planted_project(tmp_path, tmp_path / "touched")
    (tmp_path / "src" / "sitecustomize.py").unlink()
    (tmp_path / what).chmod(0o666 if what.endswith((".toml", ".yaml")) else 0o777)
    with pytest.raises(ConfigError, match=f"{tmp_path / what} is writable by every user"):
        find_project(work)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user takes root")
def test_a_project_that_belongs_to_another_user_is_refused(tmp_path, capsys, monkeypatch):
    marker = tmp_path / "touched"
    (tmp_path / "theirs").mkdir()
    work = planted_project(tmp_path / "theirs", marker)
    os.chown(tmp_path / "theirs", 54321, 54321)
    error = refused_train(work, capsys, monkeypatch)
    assert f"{tmp_path / 'theirs'} belongs to another user (uid 54321)" in error
    assert not marker.exists()
    (tmp_path / "theirs" / "src" / "sitecustomize.py").unlink()
    monkeypatch.setenv("SUDO_UID", "54321")  # root by sudo, for the user who owns it: as git does
    assert find_project(work).root == tmp_path / "theirs"


def test_the_refusal_is_one_line_whatever_the_folders_are_named(tmp_path, capsys, monkeypatch):
    shared = tmp_path / "sha\nred"
    shared.mkdir()
    marker = tmp_path / "touched"
    work = planted_project(shared, marker)
    shared.chmod(0o777)
    error = refused_train(work, capsys, monkeypatch)
    assert f"{str(shared)!r} is writable by every user" in error and not marker.exists()


def test_the_user_trusts_a_project_by_naming_it_or_running_from_it(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    work = planted_project(shared, tmp_path / "touched")
    (shared / "src" / "sitecustomize.py").unlink()
    shared.chmod(0o777)
    assert find_project(shared).root == shared
    monkeypatch.setenv("RUNNER_TRUSTED_PROJECTS", f"/elsewhere{os.pathsep}{shared}")
    assert find_project(work).root == shared


def test_a_code_folder_with_a_file_python_runs_at_start_is_refused(tmp_path, capsys, monkeypatch):
    marker = tmp_path / "touched"
    planted_project(tmp_path, marker)
    error = refused_train(tmp_path, capsys, monkeypatch)
    assert error.startswith(f"runner: error: {tmp_path / 'pyproject.toml'}: [tool.runner] code: the code ")
    assert "holds sitecustomize.py, which Python would run at the start of every process" in error
    (tmp_path / "src" / "sitecustomize.py").unlink()
    (tmp_path / "src" / "zz.pth").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n")
    assert "holds zz.pth, which Python would run" in refused_train(tmp_path, capsys, monkeypatch)
    assert not marker.exists()


@pytest.mark.slow
def test_a_planted_project_above_runs_nothing_in_a_sweep(tmp_path):
    """The real command line, a joblib sweep (whose workers would import sitecustomize): one line,
    exit 2, nothing planted runs and nothing is written."""
    shared = tmp_path / "shared"
    shared.mkdir()
    marker = tmp_path / "touched"
    work = planted_project(shared, marker)
    shared.chmod(0o777)
    environment = {"PYTHONPATH": "", "RUNNER_PROJECT": "", "RUNNER_TRUSTED_PROJECTS": ""}
    result = run_cli("train", "-m", "hydra/launcher=joblib", "model=mlp", "optimizer.lr=0.1,0.2", cwd=work,
                     env=environment)  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "not trusted as your project" in result.stderr
    assert not marker.exists() and os.listdir(work) == []
