"""What makes a directory a run's: the files a run writes once it has started. A new run into a
directory that holds them is refused (it would mix two runs' checkpoints and events)."""

import os
from pathlib import Path

from runner.config.errors import ConfigError

# What a run writes into its directory once it has started (Hydra's record and log come before it and
# are not a run: a run refused or killed during its set-up leaves only those).
RUN_FILES = ("run.yaml", "data_split.json", "result.json")
RUN_FOLDERS = ("checkpoints",)
EVENTS_PREFIX = "events.out.tfevents."
# The HParams columns of the runs under a folder (a sweep's, outputs/): a record of runs, not a run.
COLUMNS_RECORD = "events.out.tfevents.0000000000.experiment"
# Every fixed name runner or Hydra gives an entry of a run directory, and what it is there: a folder
# (True) or a file (False), with what it holds, for the one line that refuses the wrong kind.
RUN_PLACES = {
    ".hydra": (True, "Hydra's record of its config"),
    "checkpoints": (True, "its checkpoints"),
    "train.log": (False, "its log"),
    "run.yaml": (False, "the record of its config"),
    "data_split.json": (False, "the record of its data split"),
    "result.json": (False, "its result"),
    "trackers.json": (False, "its trackers' run ids"),
    "events.out.tfevents.0000000000.hparams": (False, "its HParams record"),
}


def run_files_in(run_dir: Path) -> list[str]:
    """The names in ``run_dir`` that show a run wrote there; none for a new or a user's own folder."""
    try:
        names = sorted(os.listdir(run_dir)) if run_dir.is_dir() else []
    except OSError:
        return []
    folders = [f"{name}/" for name in names if name in RUN_FOLDERS and holds_anything(run_dir / name)]
    files = [
        name
        for name in names
        if (name in RUN_FILES or (name.startswith(EVENTS_PREFIX) and name != COLUMNS_RECORD))
        and not (run_dir / name).is_dir()  # a folder under a file's name: refused as such (RUN_PLACES)
    ]
    return folders + files


def holds_anything(folder: Path) -> bool:
    """A run's folder that holds something: an empty ``checkpoints/`` (made ahead for a mount) is no run."""
    try:
        return folder.is_dir() and any(folder.iterdir())
    except OSError:
        return True  # unreadable: taken as a run's, never written over


def refuse_existing_run(run_dir: Path, given: str, command: str = "train") -> None:
    """A new run (no ``resume=``) into a directory that holds a run is refused, naming both ways on;
    another command that writes (``lr_find``) never writes into a run's directory."""
    found = run_files_in(run_dir)
    if not found:
        return
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    ways = (
        f"to continue it, give resume={run_dir} (or resume=auto); to start a new run, give"
        if command == "train"
        else f"{command} writes a folder of its own: give"
    )
    raise ConfigError(
        f"{given}: {run_dir} already holds a run ({shown}); {ways} a fresh directory "
        "(hydra.run.dir=NEW_DIR), or leave hydra.run.dir out"
    )
