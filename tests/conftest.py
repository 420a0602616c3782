import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.cli.train import main_train
from runner.config.schema import RunConfig
from runner.config.typed import typed_config
from runner.experiment.train import train
from runner.observe.hparams import HPARAMS_FILE

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"
torch.set_num_threads(1)  # as the subprocess tests run (OMP_NUM_THREADS=1): two test workers, two cores


def composed(*overrides: str) -> RunConfig:
    """The real config, composed by Hydra's compose API from runner's conf/, typed and checked."""
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return typed_config(compose("config", overrides=list(overrides)))


@pytest.fixture
def train_here(tmp_path, caplog, monkeypatch):
    """Train in this process with the real composed config, as ``python -m runner train`` would,
    into ``tmp_path / "run"`` (or ``run_dir=``); runner's log lines are in ``caplog``. The test
    plug-ins (``tests/plugins``) are importable."""
    caplog.set_level(logging.INFO, logger="runner")
    monkeypatch.syspath_prepend(str(PLUGINS))

    def run(*overrides: str, run_dir: Path | None = None) -> Path:
        run_dir = run_dir or tmp_path / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        train(composed(*overrides), run_dir, build=instantiate)
        return run_dir

    return run


@pytest.fixture(autouse=True)
def _hydra_leaves_logging_and_argv_as_they_were(monkeypatch):
    """A command run in this process under Hydra (``main_train``, ``main(["eval", ...])``) sets up
    logging (handlers on the root logger, on streams pytest closes after the test), runner sends warnings
    through it and writes ``sys.argv`` for Hydra: all put back for the tests after."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def run_cli(*arguments: str, cwd: Path, env: dict | None = None, timeout: float = 240):
    """``python -m runner ...`` in a real subprocess, as a user runs it."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "runner", *arguments],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_example(name: str, *overrides: str, run_dir: Path):
    """``python -m runner train`` on an example in ``examples/NAME`` from the repository root, as its
    README line runs it: its package on PYTHONPATH, its config folder on the search path."""
    return run_cli(
        "train", f"hydra.searchpath=[file://examples/{name}/conf]", f"+experiment={name}", *overrides,
        f"hydra.run.dir={run_dir}", cwd=REPO, env={"PYTHONPATH": f"examples/{name}"},
    )  # fmt: skip


def job_dir(sweep_dir: Path, number: int) -> Path:
    """Job ``number``'s directory in a sweep Hydra ran: named by its number, zero-padded, then the
    settings the sweep varies (``003_optimizer.lr=0.01,seed=1``); the only one with that number."""
    (found,) = [path for path in sweep_dir.iterdir() if re.fullmatch(rf"0*{number}(_.*)?", path.name)]
    return found


def event_files(run_dir: Path) -> list[Path]:
    """The run's event files of scalars and text (not its hparams record)."""
    return [path for path in run_dir.glob("events.out.tfevents.*") if path.name != HPARAMS_FILE]


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a run, read back with TensorBoard's own reader."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


# A few optimizer steps on the tiny built-ins: what most CLI tests need.
TINY = (
    "data=classification",
    "data.dataset.num_train=64",
    "data.dataset.num_val=32",
    "data.batch_size=16",
    "trainer.max_steps=4",
    "trainer.log_every_n_steps=1",
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    files = (path for path in folder.rglob("*") if path.is_file())
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns) for path in files}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A tiny run trained through the CLI, once per test module (tests copy it before they change it)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    result = run_cli("train", *TINY, f"hydra.run.dir={run_dir}", cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr
    return run_dir


def refused_here(capsys, run, says: str) -> str:
    """``run()`` exits 2 with runner's one-line error naming ``says``."""
    with pytest.raises(SystemExit) as exited:
        run()
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    lines = [line for line in error.splitlines() if line.strip()]
    assert lines[-1].startswith("runner: error: ") and says in lines[-1], error
    assert "Traceback" not in error
    return lines[-1]


@pytest.fixture(scope="module")
def trained_in_process(tmp_path_factory) -> Path:
    """A finished run, trained once per module through the command line (in this process)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    main_train([*TINY, f"hydra.run.dir={run_dir}"])
    return run_dir


@pytest.fixture
def finished(trained_in_process, tmp_path) -> Path:
    """A copy of it, the test's own."""
    return Path(shutil.copytree(trained_in_process, tmp_path / "finished"))


def train_refused(tmp_path, monkeypatch, capsys, *overrides: str) -> str:
    """``runner train`` of the tiny run in this process, with the test plug-ins importable and the run in
    ``tmp_path/run``: it exits 2 in one line, no traceback; that line without its prefix."""
    from runner.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(PLUGINS))
    with pytest.raises(SystemExit) as exited:
        main(["train", *TINY, *overrides, f"hydra.run.dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.removeprefix("runner: error: ")
