"""The Hydra callback that looks at the composed config as a run or a sweep starts, before Hydra writes
anything: the run or sweep directory must resolve (an unset environment variable in it is one line, not
OmegaConf's traceback), and a launcher's settings must be ones it can run (joblib's ``n_jobs=0`` and
submitit's ``timeout_min=-1`` are tracebacks from inside the launcher otherwise). It notes the directory
a run is about to get, so that a write Hydra cannot make there (a full disk) removes what it left, and
for a sweep whose jobs run in worker processes it takes the stop signals (``worker_stop``).

Hydra turns an exception raised in a callback into a warning and goes on, so a refusal here exits."""

import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.cli.exits import exit_with
from runner.cli.hydra.write_guard import guard_run_dir, guard_sweep_dir
from runner.cli.processes import worker_stop
from runner.config.errors import ConfigError

NAME_MAX, PATH_MAX = 255, 4096  # the longest folder name and path most file systems take (bytes)
# The run directory Hydra is about to make (the last run started in this process).
planned_run_dir: list[Path] = []
new_sweep_dir: list[Path] = []  # a sweep directory that did not exist when the sweep started
# The submitit launchers' (local and Slurm) integer settings and the least each takes; unset (null)
# where the launcher allows it.
SUBMITIT_MINIMUMS = {"timeout_min": 1, "nodes": 1, "tasks_per_node": 1, "cpus_per_task": 1,
                     "gpus_per_node": 0, "mem_gb": 1}  # fmt: skip


def check_folder_names(given: str, path: str) -> None:
    """A run or sweep directory whose path the file system cannot hold (a folder name over 255 bytes)."""
    for part in Path(path).parts:
        if len(part.encode()) > NAME_MAX:
            raise ConfigError(
                f"{given[:60]}...: the folder name {part[:20]}... is {len(part.encode())} bytes long; file "
                f"systems take names of at most {NAME_MAX} bytes"
            )
    if len(path.encode()) > PATH_MAX:
        raise ConfigError(f"{given[:60]}...: the path is {len(path.encode())} bytes long; at most {PATH_MAX}")


def resolved_dir(config: DictConfig, key: str) -> Path:
    """``hydra.run.dir`` or ``hydra.sweep.dir`` as Hydra will resolve it; one line if it cannot be."""
    section, _, name = key.rpartition(".")
    given = OmegaConf.to_container(OmegaConf.select(config, section), resolve=False)[name]
    try:
        resolved = str(OmegaConf.select(config, key, throw_on_missing=True))
        check_folder_names(f"{key}={given}", resolved)
    except OmegaConfBaseException as error:
        exit_with(ConfigError(f"{key}={given}: it cannot be resolved ({str(error).splitlines()[0]})"))
    except ConfigError as error:
        exit_with(error)
    return Path(resolved)


def check_launcher(launcher: Any) -> None:
    target = str(launcher.get("_target_", ""))
    if "JoblibLauncher" in target and launcher.get("n_jobs") == 0:
        exit_with(ConfigError(
            "hydra.launcher.n_jobs=0: the joblib launcher runs n_jobs jobs at once; give a positive "
            "number, or -1 for one job per CPU core"
        ))  # fmt: skip
    if "hydra_submitit_launcher" not in target:
        return
    for key, least in SUBMITIT_MINIMUMS.items():
        value = launcher.get(key)
        if isinstance(value, int) and value < least:
            exit_with(ConfigError(f"hydra.launcher.{key}={value}: the submitit launcher's {key} is at least "
                                  f"{least}"))  # fmt: skip


class StartChecks(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        planned_run_dir[:] = [resolved_dir(config, "hydra.run.dir").absolute()]
        guard_run_dir(config, planned_run_dir[0])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        planned_run_dir.clear()  # a sweep's job directories are the launcher's to make
        sweep_dir = resolved_dir(config, "hydra.sweep.dir")
        new_sweep_dir[:] = [] if sweep_dir.exists() else [sweep_dir.absolute()]
        check_launcher(config.hydra.launcher)
        guard_sweep_dir(config, sweep_dir.absolute())
        if "JoblibLauncher" in str(config.hydra.launcher.get("_target_", "")):
            worker_stop.watch(sweep_dir)
        prepare_mlflow(config, sweep_dir.absolute())


def prepare_mlflow(config: DictConfig, sweep_dir: Path) -> None:
    """``logger=[mlflow]``: the sweep's store and parent run, made before any job starts (its jobs,
    started at once, then only find them); a store MLflow refuses is one line before any job runs."""
    try:
        loggers = list(config.get("logger") or [])
        settings = config.get("mlflow") or {}
        tracking_uri, experiment = settings.get("tracking_uri"), settings.get("experiment")
    except OmegaConfBaseException:
        return  # the jobs' own checks name what cannot be resolved
    if "mlflow" not in loggers or not isinstance(experiment, str) or int(os.environ.get("RANK", 0)) != 0:
        return
    from runner.config.errors import UserError
    from runner.observe.mlflow_tracker import prepare_sweep

    try:
        prepare_sweep(sweep_dir, tracking_uri, experiment)
    except UserError as error:
        exit_with(error)
