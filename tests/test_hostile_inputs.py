"""The hostile-input cases (``tests/hostile_inputs/cases.py``: wrong and adversarial command lines,
damaged and malicious checkpoints, tampered run folders), each through runner's real command-line entry
and judged as ``scripts/bad_inputs.py`` judges them: the expected answer (a refusal in one line, exit 2,
no traceback; a valid command's exit 0; doctor's failing check), nothing written that should not be, no
code a file names run. In this process where the process is not the point; where it is (torchrun,
processes meeting at a port, setpriv, a mounted disk, modules a starting interpreter imports, FSDP), a
sample as processes (slow). ``python scripts/bad_inputs.py`` runs every case as a process."""

import logging
import os
import random
import signal
import sys
import traceback
import warnings
from pathlib import Path

import numpy
import pytest
import torch
from conftest import PLUGINS, REPO
from hostile_inputs.cases import CASES
from hostile_inputs.judging import Context, Skip, changes, snapshot
from hostile_inputs.running import build_fixtures, needs_a_process, outcome, release, run_case

from runner.cli.main import main
from runner.cli.train import main_train

# Cases a named test checks as fully, and more (what a continued sweep keeps of the job it cannot read).
CHECKED_ELSEWHERE = {
    "i32-sweep-continued-alias-run-yaml": "test_bounded_files.py",
    "i32-sweep-continued-binary-run-yaml": "test_bounded_files.py",
    "hidden-sweep-continued-result-nested-too-deep": "test_forged_run_files.py",
}
HERE = [case for case in CASES if not needs_a_process(case) and case.id not in CHECKED_ELSEWHERE]
# One or two of each reason a case needs a process of its own; every one: scripts/bad_inputs.py.
AS_PROCESSES = [case for case in CASES if case.id in {
    "torchrun-existing-run", "place-readonly-outputs", "resume-read-only-run-dir", "report-full-disk",
    "env-rank-0-without-peers", "env-rank-1-without-rank-0", "sharded-index-memory-error",
    "i32b-eval-with-planted-modules", "i39-train-code-folder-hides-torch",
    "i52-train-sitecustomize-in-code-folder",
}]  # fmt: skip
CASE_SECONDS = 120  # as the script's default timeout: a case that blocks (a FIFO read) fails, not hangs


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """The finished run the fixtures copy, as the script builds it (20 steps of the default experiment)."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    root, argv = logging.getLogger(), list(sys.argv)
    handlers, level = list(root.handlers), root.level
    main_train(["trainer.max_steps=20", "trainer.max_epochs=null", f"hydra.run.dir={run_dir}"])
    for handler in [handler for handler in root.handlers if handler not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    sys.argv[:] = argv  # Hydra's logging and command line, as the modules after this one found them
    return run_dir


def exit_status(arguments: list[str], folder: Path, monkeypatch) -> int:
    """``main(arguments)`` in ``folder``, ended as the interpreter ends ``python -m runner``: its exit
    status, an uncaught exception's traceback on stderr."""

    def too_long(signum, frame):
        raise TimeoutError(f"still running after {CASE_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(CASE_SECONDS)
    try:
        with monkeypatch.context() as inside:
            inside.chdir(folder)
            main(arguments)
    except SystemExit as exited:
        if exited.code is None or isinstance(exited.code, int):
            return exited.code or 0
        print(exited.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return 0


OTHER_TESTS_CODE = (str(PLUGINS), str(REPO / "examples"))  # what other tests import here


@pytest.fixture
def process_state(tmp_path_factory):
    """What a command run in this process may change for the tests after it, put back: environment,
    import path and modules imported from test folders, recursion limit, signal handlers, warnings
    filters, loggers, torch's and the random generators' global settings. torch.distributed and Hydra
    must be left as they were found."""
    from hydra.core.global_hydra import GlobalHydra

    environment, path, modules = dict(os.environ), list(sys.path), set(sys.modules)
    limit, filters = sys.getrecursionlimit(), list(warnings.filters)
    handlers = {
        number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    }
    loggers = {name: (logger.level, logger.disabled, logger.propagate, list(logger.handlers))
               for name, logger in logging.Logger.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}  # fmt: skip
    torch_settings = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
                      torch.get_float32_matmul_precision(), torch.get_default_dtype())  # fmt: skip
    generators = (torch.get_rng_state(), random.getstate(), numpy.random.get_state())
    # A fresh ``python -m runner`` has none of the test plug-ins or examples other tests imported here: a
    # case's project may hold a module of the same name (own_steps), which runner refuses to mix with another.
    plugins = {name: module for name, module in sys.modules.items()
               if str(getattr(module, "__file__", None) or "").startswith(OTHER_TESTS_CODE)}  # fmt: skip
    for name in plugins:
        del sys.modules[name]
    yield
    os.environ.clear()
    os.environ.update(environment)
    sys.path[:] = path
    temporary = str(tmp_path_factory.getbasetemp())
    for name in set(sys.modules) - modules:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(temporary):
            del sys.modules[name]
    sys.modules.update(plugins)
    sys.setrecursionlimit(limit)
    warnings.filters[:] = filters
    for number, handler in handlers.items():
        signal.signal(number, handler)
    for name, (level, disabled, propagate, kept) in loggers.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.disabled, logger.propagate, logger.handlers[:] = disabled, propagate, kept
    threads, deterministic, matmul, dtype = torch_settings
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)
    torch.set_float32_matmul_precision(matmul)
    torch.set_default_dtype(dtype)
    torch.set_rng_state(generators[0])
    random.setstate(generators[1])
    numpy.random.set_state(generators[2])
    assert not torch.distributed.is_initialized(), "a case left a process group"
    assert not GlobalHydra.instance().is_initialized(), "a case left Hydra initialized"


@pytest.mark.parametrize("case", HERE, ids=[case.id for case in HERE])
def test_hostile_input_in_this_process(case, base_run, tmp_path, monkeypatch, capfd, process_state):
    if case.id.endswith(("cuda", "cuda0")) and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cwd, marker = tmp_path / "work", tmp_path / "marker" / "CREATED_BY_CODE_EXECUTION"
    cwd.mkdir()
    marker.parent.mkdir()

    def runner_here(arguments: list[str], folder: Path) -> tuple[int, str]:
        """For a fixture that runs runner (a sweep to damage): its exit status and stderr."""
        return exit_status(arguments, folder, monkeypatch), capfd.readouterr().err

    limit = sys.getrecursionlimit()
    try:
        build_fixtures(case, cwd, Context(base_run, marker, runner_here))
    except Skip as skip:
        pytest.skip(str(skip))
    sys.setrecursionlimit(limit)  # a fixture raised it to write a deep file; a run starts with the default
    for name, value in case.env:
        if name == "PYTHONPATH":  # the working folder's modules importable, as the case's PYTHONPATH says
            monkeypatch.syspath_prepend(str(cwd))
        else:
            monkeypatch.setenv(name, value)
    for name in [name for name in os.environ if name.startswith("HYDRA_")]:
        monkeypatch.delenv(name)
    before = snapshot(cwd)
    capfd.readouterr()
    try:
        status = exit_status(list(case.args), cwd / case.cwd, monkeypatch)
        out, err = capfd.readouterr()
        result = outcome(case, status, out, err, changes(before, snapshot(cwd)), marker.exists())
    finally:
        release(case, cwd)
    assert result.fine, (result.verdict, result.exit_code, result.wrote, err[-3000:], out[-1000:])


@pytest.mark.slow
@pytest.mark.parametrize("case", AS_PROCESSES, ids=[case.id for case in AS_PROCESSES])
def test_hostile_input_as_a_process(case, base_run, tmp_path):
    result = run_case(case, tmp_path, base_run, timeout=240)
    if result.verdict == "skipped":
        pytest.skip(result.last_line)
    assert result.fine, result
