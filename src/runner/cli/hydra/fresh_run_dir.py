"""A new run gets a directory of its own: ``train`` into one that already holds a run (finished,
failed or killed) would mix two runs' checkpoints and events, and overwrite the first one's record.
Continuing it is ``resume=``; a directory a scheduler reruns in is ``resume=auto``."""

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from runner.cli.arguments import CommandLine
from runner.cli.exits import exit_with
from runner.config.errors import ConfigError
from runner.experiment.run_files import refuse_existing_run


def check_directory_values(command_line: CommandLine) -> None:
    """``hydra.run.dir=`` (or ``hydra.sweep.dir=``) empty would write into the current folder, among
    whatever is there: refused."""
    for key in ("hydra.run.dir", "hydra.sweep.dir"):
        override = command_line.last(key)
        if override is None:
            continue
        value = override.value()
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ConfigError(
                f"{override.input_line}: an empty {key} writes into the current folder; give a folder of "
                f"its own ({key}=DIR), or leave {key} out (outputs/<date>/<time>)"
            )


def check_new_run_dir(command_line: CommandLine) -> None:
    """Before Hydra writes anything: the run directory the command line names, for a run that does not
    resume. Sweeps continue their jobs' directories themselves (``search.continuation``)."""
    check_directory_values(command_line)
    request = command_line.last("resume")
    if command_line.sweep or (request is not None and request.value() is not None):
        return
    named = command_line.last("hydra.run.dir")
    if named is not None:
        refuse_existing_run(Path(str(named.value())), named.input_line)


class NewRunDir(Callback):
    """Before Hydra writes its record into the run directory (``on_run_start`` comes first): a new
    ``train`` run into a directory that already holds one is refused, whichever config names it, so the
    first run's record is kept too."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        command = config.hydra.job.name
        if command not in ("train", "lr_find") or (command == "train" and config.get("resume") is not None):
            return
        run_dir = str(config.hydra.run.dir)
        try:  # under the folder's lock (write_guard), taken by the callback before this one
            refuse_existing_run(Path(run_dir), f"hydra.run.dir={run_dir}", command)
        except ConfigError as error:  # Hydra turns a callback's exception into a warning, not SystemExit
            exit_with(error)
