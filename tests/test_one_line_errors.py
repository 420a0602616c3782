"""What a hostile pass found still ending in a traceback, through the real CLI: each is one line (exit 2,
``runner: error: ...``), and nothing is left half-written, 0 bytes long, or written outside the place
the command writes to. Refusals whose line is all there is to check are hostile-input cases
(``tests/hostile_inputs/cases.py``, run by test_hostile_inputs.py)."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TINY, run_cli

pytestmark = pytest.mark.slow  # real subprocesses: the process is the point

QUICK = ("trainer.max_steps=2", "trainer.max_epochs=null")
UNSET = "RUNNER_TEST_SURELY_UNSET"


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("runner: error: "), result.stderr
    return errors[0]


def files_under(root: Path) -> dict[str, int]:
    return {str(path.relative_to(root)): path.lstat().st_size for path in sorted(root.rglob("*"))}


def job(sweep: Path, number: int, lr: str, best: float) -> None:
    """A finished job as runner leaves it, less its events: Hydra's record of it and its result."""
    (sweep / str(number) / ".hydra").mkdir(parents=True)
    (sweep / str(number) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"optimizer.lr={lr}"]))
    (sweep / str(number) / "result.json").write_text(json.dumps({"status": "ok", "best": best}))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    directory = tmp_path / "sweep"
    job(directory, 0, "0.1", 0.5)
    job(directory, 1, "0.2", 0.4)
    return directory


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("damaged", ["1/result.json", "1/.hydra/overrides.yaml"])
def test_report_skips_a_record_nested_too_deeply_with_a_warning(sweep, damaged):
    (sweep / damaged).write_text(DEEP)
    result = run_cli("report", str(sweep), cwd=sweep.parent)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"runner: warning: skipping {sweep / damaged}: it is nested too deeply" in result.stderr
    assert (sweep / "summary.csv").read_text().count("\n") == 3  # the header and both jobs


def test_report_replaces_a_summary_link_and_never_writes_where_it_points(sweep, tmp_path):
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("not the sweep's\n")
    (sweep / "summary.csv").symlink_to(elsewhere)
    result = run_cli("report", str(sweep), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert elsewhere.read_text() == "not the sweep's\n"
    assert not (sweep / "summary.csv").is_symlink()
    assert (sweep / "summary.csv").read_text().startswith("job,status,optimizer.lr,")


def run_limited(max_file_bytes: int, *arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m runner`` under ``ulimit -f``: the kernel refuses to grow any file past the limit
    (EFBIG, as a full disk refuses with ENOSPC; Python ignores SIGXFSZ)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "runner", *arguments], cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=240, preexec_fn=limit,
    )  # fmt: skip


def test_report_on_a_full_disk_is_one_line_and_keeps_the_old_summary(sweep, tmp_path):
    assert run_cli("report", str(sweep), cwd=tmp_path).returncode == 0
    (sweep / "1" / "result.json").write_text(json.dumps({"status": "ok", "best": 0.3}))
    before = {name: (sweep / name).read_bytes() for name in ("summary.csv", "summary.md")}
    line = one_error_line(run_limited(0, "report", str(sweep), cwd=tmp_path))
    assert line == (
        f"runner: error: cannot write {sweep / 'summary.csv'}: File too large; free space or make it "
        "writable and rerun"
    )
    assert {name: (sweep / name).read_bytes() for name in before} == before  # whole, as they were
    assert not [path for path in sweep.iterdir() if path.name.endswith(".tmp")]


def test_lr_find_on_a_disk_that_takes_nothing_is_one_line_leaving_no_run_dir(tmp_path):
    line = one_error_line(run_limited(0, "lr_find", *TINY, cwd=tmp_path))
    assert line.startswith(f"runner: error: cannot write {tmp_path / 'outputs' / 'lr_find'}/")
    assert line.endswith(": File too large; free space, or choose another place with hydra.run.dir=DIR "
                         "(hydra.sweep.dir=DIR for sweeps)")  # fmt: skip
    assert files_under(tmp_path) == {}  # Hydra's 0-byte record and log went with the directory


def test_lr_find_whose_plot_the_disk_refuses_is_one_line_with_the_suggestion(tmp_path):
    """Hydra's record, the log and the curve's events fit under 20 KB; the plot does not."""
    pytest.importorskip("matplotlib")
    line = one_error_line(run_limited(20_000, "lr_find", "hydra.run.dir=found", cwd=tmp_path))
    plot = tmp_path / "found" / "lr_find.png"
    assert line.startswith(f"runner: error: cannot write {plot}: File too large; the curve is not saved "
                           "(optimizer.lr=")  # fmt: skip
    assert line.endswith(" suggested); free space and run lr_find again")
    files = files_under(tmp_path / "found")
    assert "lr_find.png" not in files and 0 not in files.values(), files
    assert not [name for name in files if name.endswith(".tmp")]
