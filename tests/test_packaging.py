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
    assert "runner/data/digits.csv.gz" in names

    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_cli("train", "--info", "searchpath", cwd=elsewhere, env={"PYTHONPATH": str(installed)})
    assert result.returncode == 0, result.stderr
    assert f"file://{installed / 'runner' / 'conf'}" in result.stdout
