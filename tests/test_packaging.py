"""conf/ ships inside the wheel and is found from any working directory."""

import subprocess
import sys
import zipfile

import pytest
from conftest import REPO, run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point


def test_wheel_carries_conf_and_runs_from_elsewhere(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(tmp_path / "dist")],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("runner-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "runner/conf/config.yaml" in names
    assert "runner/conf/data/digits.yaml" in names
    assert "runner/conf/hydra/sweeper/sampler/tpe.yaml" in names  # the Optuna search's options
    assert "runner/data/digits.csv.gz" in names
    assert "hydra_plugins/runner_optuna_sweeper/optuna_sweeper.py" in names  # the Optuna sweeper plugin
    assert "hydra_plugins/__init__.py" not in names  # a namespace shared with Hydra's own plugins

    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_cli("train", "--info", "searchpath", cwd=elsewhere, env={"PYTHONPATH": str(installed)})
    assert result.returncode == 0, result.stderr
    assert f"file://{installed / 'runner' / 'conf'}" in result.stdout
    plugins = run_cli("train", "--info", "plugins", cwd=elsewhere, env={"PYTHONPATH": str(installed)})
    assert "OptunaSweeper" in plugins.stdout, plugins.stdout + plugins.stderr


def test_the_installed_dependencies_agree_with_each_other():
    """With the sweeps extra (Optuna and optuna-dashboard among them), nothing holds another package
    back: pip finds no broken requirement."""
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No broken requirements found" in result.stdout
