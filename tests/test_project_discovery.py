"""A project found from the working folder never runs code it should not, never hangs, and the Python
API leaves each call as it found the process. Only the commands that build the user's model or data
import a project's code; a folder that holds a run is no project; a code folder never hides a library;
``pyproject.toml`` is read bounded and once; messages name the file and its key. In this process where
the process is not the point, in a subprocess (slow) where it is."""

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY, run_cli, snapshot

import runner
from runner.checkpoint.files import CHECKSUM_KEY, atomic_save
from runner.cli.hydra.hydra_app import store_project_defaults
from runner.cli.main import main
from runner.cli.train import main_train
from runner.config.errors import ConfigError
from runner.config.project import PROJECT_ENV, find_project
from runner.config.project_file import read_before

MARKER_MODULE = "open({marker!r}, 'w').write({name!r})\n"


@pytest.fixture(autouse=True)
def process_as_found(monkeypatch):
    """What entering a project changes in this process, put back after each test: the import path,
    PYTHONPATH and RUNNER_PROJECT, the project's defaults in Hydra's ConfigStore, the files read."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("PYTHONPATH", PROJECT_ENV):
        monkeypatch.setenv(name, "x")  # so that monkeypatch restores (or removes) it afterwards
        monkeypatch.delenv(name)
    modules = set(sys.modules)
    yield
    for name in set(sys.modules) - modules:
        if name.startswith(("planted", "lab39")):
            del sys.modules[name]
    store_project_defaults(None)
    read_before.clear()


def make_project(root: Path, table: str = "[tool.runner]\n", code: dict[str, str] | None = None) -> Path:
    (root / "conf").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(table)
    for name, text in (code or {}).items():
        (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "src" / name).write_text(text)
    return root


def run_main(arguments: list[str]) -> int:
    """``main`` as the command line runs it: its exit status (0 where it returns)."""
    try:
        main(arguments)
    except SystemExit as stop:
        return stop.code or 0
    return 0


def exits(capsys, arguments: list[str], code: int = 2) -> str:
    with pytest.raises(SystemExit) as stop:
        main(arguments)
    error = capsys.readouterr().err
    assert stop.value.code == code, error
    assert "Traceback" not in error
    return error


def one_line(capsys, arguments: list[str], says: str) -> str:
    error = exits(capsys, arguments)
    lines = [line for line in error.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("runner: error: ") and says in lines[0], error
    return lines[0]


# --- 1. What may import a project's code --------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [["report", "."], ["consolidate", "nothing.pt"], ["init", "newlab39"], ["train", "--help"]],
    ids=["report", "consolidate", "init", "train --help"],
)
def test_report_consolidate_init_and_help_put_no_project_code_on_the_path(
    tmp_path, monkeypatch, capsys, arguments
):
    project = make_project(tmp_path / "above", code={"planted39.py": ""})
    start = project / "work"
    start.mkdir()
    monkeypatch.chdir(start)
    run_main(arguments)
    capsys.readouterr()
    assert str(project / "src") not in sys.path and "PYTHONPATH" not in os.environ


def test_train_puts_the_project_code_on_the_path(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", code={"lab39a/__init__.py": ""})
    monkeypatch.chdir(project)
    exits(capsys, ["train", "model=no_such_model"])
    assert str(project / "src") in sys.path and os.environ[PROJECT_ENV] == str(project)


@pytest.mark.slow  # the interpreter's own sys.path and a module it imports on its own are the point
def test_a_module_planted_in_a_project_above_runs_on_no_command(tmp_path):
    """A [tool.runner] file above the start folder, its code folder (the folder itself: no src/) holding
    ``yaml.py`` and ``matplotlib.py``: report, init and --help run neither; train refuses the folder."""
    marker = tmp_path / "ran"
    above = tmp_path / "above"
    make_project(above)
    for name in ("yaml", "matplotlib"):
        (above / f"{name}.py").write_text(MARKER_MODULE.format(marker=str(marker), name=name))
    start = above / "work"
    start.mkdir()
    for arguments in (["report", "."], ["init", "mylab39"], ["train", "--help"]):
        result = run_cli(*arguments, cwd=start)
        assert not marker.exists(), (arguments, marker.read_text())
        assert "Traceback" not in result.stderr, result.stderr
    result = run_cli("train", "trainer.max_steps=1", cwd=start)
    assert result.returncode == 2 and not marker.exists(), result.stderr
    assert "holds matplotlib.py, which would hide matplotlib" in result.stderr


@pytest.mark.parametrize(
    "record", [".hydra/config.yaml", "result.json", "checkpoints/last.pt", "multirun.yaml"]
)
def test_a_folder_that_holds_a_run_or_lies_inside_one_is_no_project(tmp_path, capsys, record):
    outer = make_project(tmp_path / "outer")
    run = make_project(outer / "outputs" / "run")
    (run / record).parent.mkdir(parents=True, exist_ok=True)
    (run / record).write_text("{}")
    inner = run / "inside"
    inner.mkdir()
    make_project(inner)
    for start in (run, inner):
        found = find_project(start)
        assert found is not None and found.root == outer.resolve(), (record, start)
    says = "holds a run, and a run's folder is never a project"
    assert capsys.readouterr().err.splitlines() == [
        f"runner: warning: not reading {folder.resolve() / 'pyproject.toml'}: {run.resolve()} {says}"
        for folder in (run, inner)
    ]
    (outer / "pyproject.toml").unlink()
    assert find_project(inner) is None


def test_a_folder_of_pretrained_weights_named_checkpoints_is_still_a_project(tmp_path):
    project = make_project(tmp_path / "p")
    (project / "checkpoints").mkdir()
    (project / "checkpoints" / "resnet18.pth").write_bytes(b"weights")
    assert find_project(project).root == project.resolve()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    main_train([*TINY, f"hydra.run.dir={run_dir}"])
    return run_dir


def test_a_copied_run_that_carries_a_project_makes_nothing_it_names_trusted(
    trained, tmp_path, monkeypatch, capsys
):
    """The run's own pyproject.toml and conf/ name pathlib.Path.touch, and so do its checkpoints: eval
    in the run folder refuses the target (the run's conf is data), and touches nothing."""
    marker = tmp_path / "touched"
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    make_project(run, '[tool.runner]\ncode = "."\n')
    (run / "conf" / "model").mkdir()
    (run / "conf" / "model" / "evil.yaml").write_text(f"_target_: pathlib.Path.touch\nself: {marker}\n")
    for path in (run / "checkpoints").glob("*.pt"):
        checkpoint = torch.load(path, weights_only=True)
        checkpoint.pop(CHECKSUM_KEY)
        checkpoint["config"]["model"] = {"_target_": "pathlib.Path.touch", "self": str(marker)}
        atomic_save(checkpoint, path)
    before = snapshot(run)
    monkeypatch.chdir(run)
    warning, error = exits(capsys, ["eval", "ckpt=."]).splitlines()
    assert warning.startswith(f"runner: warning: not reading {run.resolve() / 'pyproject.toml'}: ")
    assert error.startswith("runner: error: ") and "names model._target_=pathlib.Path.touch" in error
    assert not marker.exists() and snapshot(run) == before
    assert str(run) not in sys.path


@pytest.mark.parametrize("name", ["yaml", "json", "torch", "hydra_plugins"])
def test_a_code_folder_that_would_hide_a_library_is_refused_in_one_line(tmp_path, monkeypatch, capsys, name):
    code = {f"{name}.py": "raise SystemExit('the planted module ran')\n"}
    if name == "hydra_plugins":  # a regular package over the namespace runner's plugins live in
        code = {"hydra_plugins/__init__.py": ""}
    project = make_project(tmp_path / "p", code=code)
    monkeypatch.chdir(project)
    line = one_line(capsys, ["train", *TINY], f"which would hide {name}")
    assert "pyproject.toml: [tool.runner] code:" in line
    assert str(project / "src") not in sys.path and list(project.iterdir()) != []
    assert not (project / "outputs").exists()


@pytest.mark.parametrize("name", ["torch", "hydra", "json", "logging", "omegaconf", "yaml"])
def test_init_refuses_a_name_that_would_hide_a_library(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    one_line(capsys, ["init", name], f"init {name}: a package named {name} is importable already")
    assert list(tmp_path.iterdir()) == []


def test_init_dot_names_the_working_folder(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "lab39dot"
    folder.mkdir()
    monkeypatch.chdir(folder)
    assert run_main(["init", "."]) == 0
    assert "for the project lab39dot here" in capsys.readouterr().out
    assert (folder / "src" / "lab39dot" / "models.py").is_file()
    assert 'name = "lab39dot"' in (folder / "pyproject.toml").read_text()


# --- 2. Bounded reads -----------------------------------------------------------------------------


def deep(text: str = "") -> str:
    return text + "x = " + "[" * 100_000 + "]" * 100_000 + "\n"


SPECIAL = {
    "a FIFO": (lambda path: os.mkfifo(path), "it is not a plain file"),
    "a link to /dev/zero": (lambda path: path.symlink_to("/dev/zero"), "it is not a plain file"),
    "300 MiB": (lambda path: (path.touch(), os.truncate(path, 300 << 20)), "it is 314,572,800 bytes"),
    "nested 100,000 deep": (lambda path: path.write_text(deep()), "it is nested too deeply"),
    "a dotted key of 30,000 parts": (
        lambda path: path.write_text("a." * 30_000 + "b = 1\n"),
        "it holds a dotted key of more than 32 parts",
    ),
    "not TOML": (lambda path: path.write_text("[project\n"), "it is not valid TOML"),
    "not UTF-8": (lambda path: path.write_bytes(b"\xff\xfe[x]"), "it is not UTF-8 text"),
}


@pytest.mark.parametrize("case", SPECIAL)
def test_a_pyproject_that_cannot_be_read_above_the_project_is_skipped_with_one_line(tmp_path, capsys, case):
    make, says = SPECIAL[case]
    make(tmp_path / "pyproject.toml")
    project = make_project(tmp_path / "p")
    start = tmp_path / "elsewhere"
    start.mkdir()
    for _ in range(2):  # read once per process: one warning
        assert find_project(project).root == project.resolve()
        assert find_project(start) is None
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    assert error.startswith(f"runner: warning: skipping {tmp_path / 'pyproject.toml'}: {says}"), error


def test_a_broken_project_file_is_refused_in_one_line_naming_it(tmp_path, capsys):
    path = tmp_path / "pyproject.toml"
    for text, says in (
        ("[tool.runner\nconf = 'conf'\n", "it is not valid TOML"),
        (deep("[tool.runner]\n"), "it is nested too deeply"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"runner reads its \[tool.runner\] table") as refused:
            find_project(tmp_path)
        assert str(refused.value).startswith(f"{path}: {says}") and "\n" not in str(refused.value)


def test_an_unrelated_broken_pyproject_above_blocks_no_command(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[project\n")
    start = tmp_path / "work"
    start.mkdir()
    monkeypatch.chdir(start)
    error = exits(capsys, ["train", *TINY, "model=no_such_model"])
    assert "skipping" in error and "model=no_such_model: no such option" in error


# Started by the test, it starts ``python -m runner`` itself and writes that process's peak memory. A
# process forked from pytest's would carry pytest's own peak (Linux keeps ``ru_maxrss`` across exec),
# which in a full suite's worker is over the bound on its own; this one is small when it forks.
MEASURER = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a guard: a read of /dev/zero stops there
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "runner", *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss * 1024}")
"""


def run_measured(arguments: list[str], cwd: Path) -> tuple[int, str, int]:
    """``python -m runner ...``: its exit status, stderr and peak memory (bytes); killed after 60 s."""
    import signal
    import subprocess
    import threading

    measured = cwd.parent / "measured.txt"
    measured.unlink(missing_ok=True)
    with open(cwd.parent / "stderr.txt", "w+") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", MEASURER, str(measured), *arguments], cwd=cwd, stdout=subprocess.DEVNULL,
            stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        timer = threading.Timer(60, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        process.wait()
        timer.cancel()
        stderr.seek(0)
        code, memory = measured.read_text().split()
        return int(code), stderr.read(), int(memory)


@pytest.mark.slow  # python -m's start (before anything is imported) and a process's memory are the point
@pytest.mark.parametrize(
    "case",
    ["a FIFO", "a link to /dev/zero", "300 MiB", "nested 100,000 deep", "a dotted key of 30,000 parts"],
)
def test_a_special_pyproject_in_the_start_folder_neither_hangs_nor_fills_memory(tmp_path, case):
    start = tmp_path / "start"
    start.mkdir()
    SPECIAL[case][0](start / "pyproject.toml")
    for arguments in (["report", "."], ["train", "--help"]):
        code, error, memory = run_measured(arguments, start)
        assert code in (0, 2) and "Traceback" not in error, (arguments, code, error)
        assert memory < 500 << 20, (arguments, memory)


# --- 3. One call, one project ---------------------------------------------------------------------


def scaffolded(parent: Path, name: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    assert run_main(["init", str(parent / name)]) == 0
    return parent / name


def process_state() -> tuple:
    return list(sys.path), dict(os.environ), os.getcwd(), list(sys.argv)


def test_each_api_call_leaves_the_process_as_found_and_a_second_lab_is_refused(tmp_path, monkeypatch, capsys):
    first = scaffolded(tmp_path / "p1", "lab39")
    second = scaffolded(tmp_path / "p2", "lab39")
    (second / "src" / "lab39" / "models.py").write_text("raise SystemExit('p2 code')\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    before = process_state()
    steps = ["trainer.max_steps=2", "data.batch_size=64"]
    result = runner.train([*steps, f"hydra.run.dir={tmp_path / 'r1'}"], project=first)
    assert result.status == "ok" and process_state() == before
    assert sys.modules["lab39"].__file__.startswith(str(first))
    model = runner.load_model(result.run_dir, project=first)
    assert type(model).__name__ == "TwoLayerNet" and process_state() == before
    with pytest.raises(
        runner.UserError, match=r"holds lab39, which would hide lab39 \(.*p1.*imported already"
    ):
        runner.train([*steps, f"hydra.run.dir={tmp_path / 'r2'}"], project=second)
    assert process_state() == before and not (tmp_path / "r2").exists()
    # From a folder outside any project: runner's own defaults, nothing of p1's.
    later = runner.train([*TINY, "trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'r3'}"])
    assert "lab39" not in (later.run_dir / ".hydra" / "config.yaml").read_text()
    assert process_state() == before


def test_load_model_outside_the_project_names_the_way_to_it(tmp_path, monkeypatch):
    project = scaffolded(tmp_path / "p", "lab39b")
    result = runner.train(["trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'run'}"], project=project)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        runner.UserError, match=r"lab39b\.models\.TwoLayerNet, which neither runner's configs"
    ):
        runner.load_model(result.run_dir)
    assert type(runner.load_model(result.run_dir, project=project)).__name__ == "TwoLayerNet"


# --- 4. Messages ----------------------------------------------------------------------------------


def test_a_launcher_default_lists_every_installed_launcher(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", '[tool.runner]\ndefaults = {"hydra/launcher" = "nope"}\n')
    monkeypatch.chdir(project)
    line = one_line(capsys, ["train", *TINY], 'defaults hydra/launcher = "nope": no such option')
    assert "basic, joblib, slurm, submitit_local, submitit_slurm" in line
    (project / "pyproject.toml").write_text('[tool.runner]\ndefaults = {"hydra/launcher" = "joblib"}\n')
    read_before.clear()
    main(["train", "--cfg", "hydra", "-p", "hydra.launcher._target_"])
    assert "JoblibLauncher" in capsys.readouterr().out


def test_a_projects_defaults_are_gone_when_the_next_command_runs_outside_it(tmp_path, monkeypatch, capsys):
    """One process (a notebook): a command in a project that picks optimizer=sgd, then one outside any
    project, which composes runner's own default (adam) again. Between them the environment is put
    back, as ``runner.train`` puts it back (a project's worker finds it through RUNNER_PROJECT)."""
    project = make_project(tmp_path / "p", '[tool.runner]\ndefaults = {optimizer = "sgd"}\n')
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for folder, optimizer in ((outside, "Adam"), (project, "SGD"), (outside, "Adam")):
        monkeypatch.chdir(folder)
        monkeypatch.delenv(PROJECT_ENV, raising=False)
        main(["train", "--cfg", "job", "-p", "optimizer._target_"])
        assert capsys.readouterr().out.strip() == f"torch.optim.{optimizer}", folder


def test_a_default_hydra_cannot_apply_names_pyproject_and_its_key(tmp_path, monkeypatch, capsys):
    table = '[tool.runner]\ndefaults = {"hydra/sweeper/sampler" = "tpe"}\n'
    project = make_project(tmp_path / "p", table)
    monkeypatch.chdir(project)
    line = one_line(capsys, ["train", *TINY], f"{project / 'pyproject.toml'}: [tool.runner] defaults hydra/")
    assert 'sampler = "tpe": hydra/sweeper/sampler is no group of runner\'s defaults list' in line
    assert not (project / "outputs").exists()


# --- 5. Found on the adversarial pass -------------------------------------------------------------


def test_a_group_name_that_climbs_out_of_the_config_folders_is_refused(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", '[tool.runner]\ndefaults = {"../../etc" = "passwd"}\n')
    monkeypatch.chdir(project)
    one_line(capsys, ["train", *TINY], "[tool.runner] defaults '../../etc': a config group is a name")


def test_a_working_folder_removed_under_the_shell_is_one_line(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    one_line(capsys, ["train", *TINY], "the folder runner was started in no longer exists")
