"""``runner export`` as an adversary meets it: it writes through a staging folder of its own making (a
folder a user named like the old fixed one is kept), a second export to one place is refused while the
first writes, and every failure (a dangling --output link, a full disk, ``/proc``, a read-only run) is one
line, exit 2, with nothing left behind. It finds the project it runs in, as ``eval`` does, and its
messages suggest only forms it accepts. In this process, but for the read-only mount."""

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import TINY, composed
from hydra.utils import instantiate

from runner.cli.hydra.hydra_app import store_project_defaults
from runner.cli.main import main
from runner.cli.tools import main_export
from runner.config.project import PROJECT_ENV
from runner.experiment.train import train
from runner.tools.export_place import locked

safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors (the peft extra)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    run_dir.mkdir()
    train(composed(*TINY, "seed=1", "trainer.max_steps=2"), run_dir, build=instantiate)
    return run_dir


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run, for a test that exports into it."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def refused(capsys, *arguments: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main_export([*arguments])
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    assert error.startswith("runner: error: ") and error.count("\n") == 1 and "Traceback" not in error
    return error.strip()


def test_a_folder_named_like_a_staging_folder_is_the_users_and_is_kept(run):
    theirs = run / "export" / ".safetensors.tmp"  # the fixed name export once wrote through and removed
    theirs.mkdir(parents=True)
    (theirs / "notes.txt").write_text("mine")
    main_export([str(run), "--format", "safetensors"])
    assert (theirs / "notes.txt").read_text() == "mine"
    assert sorted(path.name for path in (run / "export").iterdir()) == [".safetensors.tmp", "safetensors"]
    assert [path.name for path in (run / "export" / "safetensors").iterdir()] == ["model.safetensors"]
    assert oct((run / "export" / "safetensors").stat().st_mode & 0o777) == oct(0o777 & ~umask())


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_dangling_output_link_is_refused_and_left_as_it_was(trained, tmp_path, capsys):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere" / "model")
    error = refused(capsys, str(trained), "--format", "safetensors", "--output", str(link))
    assert error == (
        f"runner: error: export: {link} is a link (to {tmp_path / 'nowhere' / 'model'}); export writes a new "
        "folder and follows no link there: give --output a path that does not exist"
    )
    assert sorted(tmp_path.iterdir()) == [link] and not (tmp_path / "nowhere").exists()


def test_a_second_export_to_one_place_is_refused_while_the_first_writes(trained, tmp_path, capsys):
    output = tmp_path / "out"
    with locked(output):  # what an export holds while it writes
        error = refused(capsys, str(trained), "--format", "safetensors", "--output", str(output))
    assert error == (
        f"runner: error: export: another export is writing {output} now (it holds "
        f"{tmp_path / '.out.export-lock'}); wait for it to end, or give another --output"
    )
    assert list(tmp_path.iterdir()) == []  # the holder's lock went with it; the refused one made nothing
    (tmp_path / ".out.export-lock").touch()  # the empty lock of an export that was killed: taken over
    main_export([str(trained), "--format", "safetensors", "--output", str(output)])
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_a_file_of_the_users_under_the_locks_name_is_kept(trained, tmp_path, capsys):
    theirs = tmp_path / ".out.export-lock"
    theirs.write_text("mine")
    error = refused(capsys, str(trained), "--format", "safetensors", "--output", str(tmp_path / "out"))
    assert f"export: {theirs} is in the way" in error
    assert theirs.read_text() == "mine" and list(tmp_path.iterdir()) == [theirs]


@contextmanager
def files_limited_to(size: int) -> Iterator[None]:
    """No file of this process may grow past ``size`` bytes (``ulimit -f``: EFBIG, as a full disk refuses
    with ENOSPC; Python ignores SIGXFSZ); the limit put back after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_full_disk_is_one_line_and_leaves_no_folder(trained, tmp_path, capsys):
    output = tmp_path / "made" / "on the way" / "out"
    with pytest.raises(SystemExit) as exited, files_limited_to(1000):
        main_export([str(trained), "--format", "safetensors", "--output", str(output)])
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    assert error == (
        f"runner: error: cannot write {output}: File too large; nothing was exported; free space and export "
        "again\n"
    )
    assert list(tmp_path.iterdir()) == []  # no staging folder, no lock, not the folders made for it


@pytest.mark.parametrize("output", ["/proc/runner-export", "/proc/self/runner-export", "/proc/sys/a/b"])
def test_an_output_in_proc_is_one_line(trained, capsys, output):
    error = refused(capsys, str(trained), "--format", "safetensors", "--output", output)
    assert error.startswith("runner: error: cannot write /proc/") and "nothing was exported" in error
    assert not Path(output).exists()


READ_ONLY_RUN = """
mount --bind "$RUN" "$RUN" && mount -o remount,ro,bind "$RUN"
"$PYTHON" -m runner export "$RUN" --format safetensors 2>"$OUT/err"
echo $? >"$OUT/rc"
"""


@pytest.mark.slow
def test_a_read_only_run_is_one_line(run, tmp_path):
    """The default output lies in the run; root ignores file modes, so the run is mounted read-only (in a
    mount namespace of its own)."""
    private = ["unshare", "--user", "--map-root-user", "--mount"]
    if shutil.which("unshare") is None or subprocess.run([*private, "true"]).returncode != 0:
        pytest.skip("cannot make a mount namespace here")
    out = tmp_path / "out"
    out.mkdir()
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "RUN": str(run), "OUT": str(out),
                   "PYTHON": sys.executable}  # fmt: skip
    subprocess.run([*private, "bash", "-c", READ_ONLY_RUN], env=environment, check=True, timeout=240)
    assert (out / "rc").read_text().strip() == "2"
    assert (out / "err").read_text() == (
        f"runner: error: cannot write {run / 'export'}: Read-only file system; nothing was exported; give "
        "--output a folder in a writable place\n"
    )


MODEL = """
import math
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, input_shape, num_outputs):
        super().__init__()
        self.out = nn.Linear(math.prod(input_shape), num_outputs)

    def forward(self, inputs):
        return self.out(inputs.flatten(1))
"""


@pytest.fixture
def process_as_found(monkeypatch):
    """What entering a project changes in this process, put back after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("PYTHONPATH", PROJECT_ENV):
        monkeypatch.setenv(name, "x")  # so that monkeypatch restores (or removes) it afterwards
        monkeypatch.delenv(name)
    yield
    sys.modules.pop("lab52_models", None)
    store_project_defaults(None)


def status_of(arguments: list[str]) -> int:
    try:
        main(arguments)
    except SystemExit as stop:
        return stop.code or 0
    return 0


def test_export_finds_the_project_it_runs_in_and_suggests_a_form_it_accepts(
    tmp_path, monkeypatch, capsys, process_as_found
):
    project = tmp_path / "lab"
    (project / "conf" / "model").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "pyproject.toml").write_text("[tool.runner]\n")
    (project / "src" / "lab52_models.py").write_text(MODEL)
    (project / "conf" / "model" / "tiny_net.yaml").write_text(
        "_target_: lab52_models.TinyNet\ninput_shape: ${data.input_shape}\nnum_outputs: ${data.num_outputs}\n"
    )
    monkeypatch.chdir(project)
    assert status_of(["train", *TINY, "model=tiny_net", "hydra.run.dir=run"]) == 0
    assert status_of(["export", "run", "--format", "safetensors"]) == 0, capsys.readouterr().err
    assert (project / "run" / "export" / "safetensors" / "model.safetensors").is_file()
    monkeypatch.chdir(tmp_path)  # outside the project: its model is code a file names
    monkeypatch.delenv(PROJECT_ENV)  # as a new process finds it: no project a parent runner named
    arguments = ["export", str(project / "run"), "--format", "safetensors", "--output", "out"]
    capsys.readouterr()
    assert status_of(arguments) == 2
    error = capsys.readouterr().err
    assert error.endswith(
        "If you trust it, allow them with allow_targets=lab52_models.TinyNet on export's command line\n"
    )
    assert status_of([*arguments, "allow_targets=lab52_models.TinyNet"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_an_output_under_a_file_or_named_dot_dot_is_one_line_and_makes_nothing(trained, tmp_path, capsys):
    (tmp_path / "a file").write_text("mine")
    error = refused(
        capsys, str(trained), "--format", "safetensors", "--output", str(tmp_path / "a file" / "out")
    )
    assert error == (
        f"runner: error: cannot write {tmp_path / 'a file' / 'out'}: Not a directory; nothing was exported; "
        "give --output a folder in a writable place"
    )
    dot_dot = tmp_path / "new" / ".."
    error = refused(capsys, str(trained), "--format", "safetensors", "--output", str(dot_dot))
    assert (
        error
        == f"runner: error: export: --output {dot_dot} names no folder of its own; give the new folder's path"
    )
    assert [path.name for path in tmp_path.iterdir()] == ["a file"]
