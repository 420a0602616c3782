"""The project ``runner init`` writes is installable, and its README says how: a plain script or a
notebook (no ``python -m runner``) then imports the project's code."""

import os
import subprocess
import sys

import pytest
import tomllib

from runner.tools.scaffold import create_project


def test_the_readme_says_to_install_the_project_for_plain_scripts_and_notebooks(tmp_path):
    create_project(tmp_path / "lab")
    readme = (tmp_path / "lab" / "README.md").read_text()
    section = readme.split("## Your code in a plain script or notebook", 1)[1]
    assert "\npip install -e .\n" in section and "`import lab` works from anywhere" in section
    project = tomllib.loads((tmp_path / "lab" / "pyproject.toml").read_text())
    assert project["project"]["name"] == "lab" and project["project"]["dependencies"] == []
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/lab"]


@pytest.mark.slow
def test_once_installed_as_its_readme_says_a_plain_script_imports_the_project(tmp_path):
    """pip installs the project (into a folder of its own here, not this environment) from its own
    pyproject.toml; a script run elsewhere, with runner nowhere on its path, imports its model."""
    create_project(tmp_path / "my-lab")
    place = tmp_path / "installed"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(place),
         str(tmp_path / "my-lab")], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    script = tmp_path / "elsewhere" / "script.py"
    script.parent.mkdir()
    script.write_text("import my_lab.models\nprint(my_lab.models.TwoLayerNet([2], 2).out.out_features)\n")
    environment = {**os.environ, "PYTHONPATH": str(place)}
    ran = subprocess.run([sys.executable, str(script)], cwd=script.parent, env=environment,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "2"
