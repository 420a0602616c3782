"""Issue 32's guarantees through the real command line: nothing written through a link or outside the
folder asked for, one lock from the check that a folder holds no run to the run's end, values checked
for range (NaN, counters, counts), every refusal before anything is written, and no module imported
from the folder runner reads. In this process where the process is not the point (``main_train``,
``main``), in a subprocess where it is."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import PLUGINS, TINY, run_cli, snapshot

from runner.checkpoint.files import CHECKSUM_KEY, atomic_save
from runner.cli.main import main
from runner.cli.start_folder import protect_sys_path
from runner.cli.train import main_train


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
def trained(tmp_path_factory) -> Path:
    """A finished run, trained once per module through the command line (in this process)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    main_train([*TINY, f"hydra.run.dir={run_dir}"])
    return run_dir


@pytest.fixture
def finished(trained, tmp_path) -> Path:
    """A copy of it, the test's own."""
    return Path(shutil.copytree(trained, tmp_path / "finished"))


def link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine")


SWEEP = ["-m", "seed=0,1", "hydra.sweep.dir=sw"]
# Each plants something in tmp_path (the start folder), then gives the command line.
PLANTED = {
    "job folder a link out of the sweep": (
        lambda root: (root / "victim").mkdir() or link(root / "sw" / "000_seed=0", "../victim"),
        SWEEP,
        "sw/000_seed=0 is a link (to ../victim)",
    ),
    "job folder a file": (
        lambda root: file(root / "sw" / "001_seed=1"),
        SWEEP,
        "sw/001_seed=1 is a file where job 1's folder goes",
    ),
    "multirun.yaml a link": (
        lambda root: link(root / "sw" / "multirun.yaml", "../notes.txt"),
        SWEEP,
        "sw/multirun.yaml is a link",
    ),
    "config.yaml a link": (
        lambda root: link(root / "run" / ".hydra" / "config.yaml", "../../notes.txt"),
        ["hydra.run.dir=run"],
        "run/.hydra/config.yaml is a link",
    ),
    "train.log a link": (
        lambda root: link(root / "run" / "train.log", "../notes.txt"),
        ["hydra.run.dir=run"],
        "run/train.log is a link",
    ),
    "the start folder": (lambda root: None, ["hydra.run.dir=."], "is the folder runner was started in"),
    "the start folder for a sweep": (
        lambda root: None,
        ["-m", "seed=0,1", "hydra.sweep.dir=."],
        "is the folder runner was started in",
    ),
}


@pytest.mark.parametrize("case", PLANTED)
def test_nothing_is_written_through_a_link_or_outside_the_folder(tmp_path, capsys, monkeypatch, case):
    plant, arguments, says = PLANTED[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the user's own")
    plant(tmp_path)
    before = snapshot(tmp_path)
    flags = [argument for argument in arguments if argument == "-m"]
    rest = [argument for argument in arguments if argument != "-m"]
    refused_here(capsys, lambda: main_train([*flags, *TINY, *rest]), says)
    assert snapshot(tmp_path) == before and (tmp_path / "notes.txt").read_text() == "the user's own"


def test_a_sweep_into_a_runs_folder_and_lr_find_into_a_run_are_refused_eval_writes_nothing(
    finished, capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    before = snapshot(finished)
    refused_here(capsys, lambda: main_train(["-m", *TINY, "seed=0,1", f"hydra.sweep.dir={finished}"]),
                 "holds a run")  # fmt: skip
    refused_here(capsys, lambda: main(["lr_find", *TINY, f"hydra.run.dir={finished}"]),
                 "lr_find writes a folder of its own")  # fmt: skip
    main(["eval", f"ckpt={finished}"])
    assert snapshot(finished) == before


def second_command(tmp_path: Path, command: list[str]) -> list[str]:
    """The overrides that make this run's data set run ``command`` to its end while it builds."""
    return [
        "data.dataset._target_=second_command.while_another_runs",
        f"+data.dataset.command={json.dumps(command)}",
        f"+data.dataset.cwd={tmp_path}",
        f"+data.dataset.record={tmp_path / 'second.json'}",
    ]


@pytest.mark.slow  # the second command is a process: two processes racing for one folder is the point
@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_second_command_into_a_folder_being_set_up_is_refused(tmp_path, monkeypatch, sweep):
    """The second starts after the first checked the folder and before it starts writing its own files
    (while its data set loads): refused in one line, before it writes; the first trains undisturbed."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    folder = tmp_path / ("sw" if sweep else "run")
    where = [f"hydra.sweep.dir={folder}", "seed=0"] if sweep else [f"hydra.run.dir={folder}"]
    flags = ["-m"] if sweep else []
    main_train([*flags, *TINY, *where, *second_command(tmp_path, ["train", *flags, *TINY, *where])])
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["returncode"] == 2, second["stderr"]
    assert second["stderr"].startswith(f"runner: error: {folder} is being written by pid {os.getpid()}")
    assert second["stderr"].count("\n") == 1
    run_dir = next(folder.glob("000*")) if sweep else folder
    assert json.loads((run_dir / "result.json").read_text())["status"] == "ok"
    events = [path for path in run_dir.glob("events.out.tfevents.*") if path.suffix != ".hparams"]
    assert len(events) == 1  # one run's events


NAN_SETTINGS = {
    "callbacks.early_stopping.min_delta": [
        "callbacks=early_stopping",
        "callbacks.early_stopping.min_delta=nan",
    ],
    "scheduler.factor": ["scheduler=plateau", "scheduler.factor=nan"],
    "callbacks.ema.decay": ["callbacks=ema", "callbacks.ema.decay=nan"],
    "loss.label_smoothing": ["+loss.label_smoothing=nan"],
}


@pytest.mark.parametrize("key", NAN_SETTINGS)
def test_no_setting_takes_nan(tmp_path, capsys, key):
    refused_here(capsys, lambda: main_train([*TINY, *NAN_SETTINGS[key], f"hydra.run.dir={tmp_path / 'run'}"]),
                 f"{key}=nan is not allowed")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_the_start_folder_is_on_the_path_only_where_pythonpath_names_it(tmp_path, monkeypatch):
    """A project's own folder too is taken off: its code folder goes on the path later, checked, and only
    for the commands that build the user's code (issue 39; tests/test_trust_fourth_round.py)."""
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


REGRESSION = ["data=regression", "data.dataset.num_train=64", "data.dataset.num_val=32", "data.batch_size=16"]
OWN_LOSS = ["model._target_=bad_values.SaysCount", "data.dataset._target_=bad_values.dict_batches",
            "loss=from_model"]  # fmt: skip
# Refused on the first batch, before the run writes anything.
FIRST_BATCH = {
    "monitor on a regression": (
        [*REGRESSION, "checkpoint.monitor=val/acc", "checkpoint.mode=max"],
        "checkpoint.monitor=val/acc is not logged by this run; it logs val/loss",
    ),
    "num_items_in_batch negative": (
        [*OWN_LOSS, "+model.count=negative"],
        "the model returned num_items_in_batch=-3, not a count",
    ),
    "num_items_in_batch negative tensor": (
        [*OWN_LOSS, "+model.count=negative-tensor"],
        "num_items_in_batch=-3, not a count",
    ),
    "num_items_in_batch 10**30": (
        [*OWN_LOSS, "+model.count=huge"],
        f"num_items_in_batch={10**30}, more than any batch holds",
    ),
    "num_items_in_batch nan": (
        [*OWN_LOSS, "+model.count=not-a-number"],
        "num_items_in_batch=nan, not a count",
    ),
    "num_items_in_batch 1-d": (
        [*OWN_LOSS, "+model.count=vector"],
        "num_items_in_batch=a tensor of shape [2], not one number",
    ),
    "sampler index -1": (
        ["data.sampler={_target_: bad_values.MinusOne}"],
        "data.sampler (MinusOne) gave index -1 in epoch 0; the training set has 64 samples",
    ),
    "carried state no checkpoint holds": (
        ["model._target_=bad_values.carries_junk"],
        "the model's carried_state (carried_state_dict)['history'] is a collections.deque",
    ),
}


@pytest.mark.parametrize("case", FIRST_BATCH)
def test_values_out_of_range_are_refused_before_the_run_writes(tmp_path, capsys, monkeypatch, case):
    overrides, says = FIRST_BATCH[case]
    monkeypatch.syspath_prepend(str(PLUGINS))
    run_dir = tmp_path / "run"
    refused_here(capsys, lambda: main_train([*TINY, *overrides, f"hydra.run.dir={run_dir}"]), says)
    assert list(tmp_path.iterdir()) == []


def test_a_count_of_0_on_every_validation_batch_is_refused_not_a_loss_of_0(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    run_dir = tmp_path / "run"
    arguments = [*TINY, *OWN_LOSS, "+model.count=zero", f"hydra.run.dir={run_dir}"]
    refused_here(capsys, lambda: main_train(arguments), "num_items_in_batch=0 on every validation batch")
    assert not (run_dir / "checkpoints" / "best.pt").exists()


FORGED = {
    "global_step": (-5, "global_step (-5: a count, >= 0)"),
    "epoch": (-1, "epoch (-1: a count, >= 0)"),
    "best_val": (float("nan"), "best_val (nan: a finite number or None)"),
    "best_val_step": (10**6, "best_val_step (1000000: a step in [0, global_step])"),
    "seed": (-1, "seed (-1: in [0, 2**32))"),
    "world_size": (0, "world_size (0: a number of processes, >= 1)"),
}


def test_checkpoint_values_out_of_range_are_refused_by_name(finished, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    last = finished / "checkpoints" / "last.pt"
    checkpoint = torch.load(last, weights_only=True)
    checkpoint.pop(CHECKSUM_KEY)
    for key, (value, says) in FORGED.items():
        forged = tmp_path / f"{key}.pt"
        atomic_save({**checkpoint, key: value}, forged)
        refused_here(capsys, lambda forged=forged: main(["eval", f"ckpt={forged}"]), says)
    atomic_save({**checkpoint, "global_step": -5}, last)  # a resume reads it too, and writes nothing
    before = snapshot(finished)
    refused_here(capsys, lambda: main_train([f"resume={last}"]), "global_step (-5: a count, >= 0)")
    assert snapshot(finished) == before
