"""Nothing is written through a link or outside the folder asked for, and one lock holds a run's folder
from the check that it holds no run to the run's end: through the real command line, in this process
where the process is not the point (``main_train``, ``main``), in a subprocess where it is."""

import json
import os
from pathlib import Path

import pytest
from conftest import PLUGINS, TINY, refused_here, snapshot, train_refused

from runner.checkpoint.files import CHECKPOINT_DIR
from runner.cli.main import main
from runner.cli.train import main_train
from runner.config.errors import ConfigError
from runner.experiment.write_places import HYDRA_RECORD_DIR
from runner.observe.hparams import HPARAMS_FILE
from runner.observe.records import RESULT_FILE
from runner.observe.trackers import TRACKERS_FILE


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


# Each name runner or Hydra writes in a run's folder, taken by the other kind: a file where a folder goes, a
# folder where a file goes.
WRONG_KIND = {
    CHECKPOINT_DIR: "file",
    HYDRA_RECORD_DIR: "file",
    "train.log": "folder",
    "run.yaml": "folder",
    "data_split.json": "folder",
    RESULT_FILE: "folder",
    TRACKERS_FILE: "folder",
    HPARAMS_FILE: "folder",
}


def plant(path: Path, kind: str) -> None:
    path.mkdir() if kind == "folder" else path.write_text("the user's own")


def entries_under(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.mark.parametrize("name", WRONG_KIND)
def test_a_name_the_run_writes_taken_by_the_other_kind_is_refused_before_anything_is_written(
    name, tmp_path, monkeypatch, capsys
):
    """Not a traceback half-way through the run (a file named ``checkpoints`` failed its first save, after
    the records were written): one line naming the entry, before Hydra or runner writes anything."""
    kind = WRONG_KIND[name]
    (tmp_path / "run").mkdir()
    plant(tmp_path / "run" / name, kind)
    before = entries_under(tmp_path)
    error = train_refused(tmp_path, monkeypatch, capsys)
    wanted = "a file" if kind == "folder" else "a folder"
    assert f"run/{name} is a {kind} where the run keeps " in error and f"({wanted}); move it away" in error
    assert entries_under(tmp_path) == before


def test_a_resume_whose_run_record_is_a_folder_is_refused_before_anything_is_written(
    finished, tmp_path, monkeypatch, capsys
):
    (finished / "run.yaml").unlink()
    (finished / "run.yaml").mkdir()
    before = entries_under(finished)
    monkeypatch.chdir(tmp_path)
    says = "finished/run.yaml is a folder where the run keeps the record of its config (a file)"
    refused_here(capsys, lambda: main(["train", *TINY, "trainer.max_steps=6", f"resume={finished}"]), says)
    assert entries_under(finished) == before


def test_training_from_python_refuses_a_file_named_checkpoints_before_writing(train_here, tmp_path):
    (tmp_path / "run").mkdir()
    plant(tmp_path / "run" / CHECKPOINT_DIR, "file")
    with pytest.raises(ConfigError, match="is a file where the run keeps its checkpoints"):
        train_here(*TINY)
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == [CHECKPOINT_DIR]
