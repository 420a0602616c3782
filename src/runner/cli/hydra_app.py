"""Hydra, through its public API: where runner's configs live, the schema registered with Hydra's
ConfigStore, the checks on overrides before Hydra composes, and running a task under ``hydra.main``."""

import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from runner.cli.arguments import CommandLine
from runner.config.checks import check_top_level_key, check_value
from runner.config.schema import DataConfig, RunConfig


def config_dir() -> Path:
    """``conf/`` inside an installed wheel, else the repository's top-level ``conf/``."""
    packaged = Path(__file__).resolve().parents[1] / "conf"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[3] / "conf"


CONFIG_DIR = config_dir()
# A few random characters after the timestamp: runs and sweeps started in the same second get
# their own directories. Cached like Hydra's own ${now:}, so every job of a sweep sees one value.
OmegaConf.register_new_resolver("unique_suffix", lambda: secrets.token_hex(2), use_cache=True, replace=True)
ConfigStore.instance().store(name="runner_schema", node=RunConfig)
ConfigStore.instance().store(group="data", name="base_data", node=DataConfig)


def group_names() -> set[str]:
    return {path.name for path in CONFIG_DIR.iterdir() if path.is_dir()}


def check_command_line(command_line: CommandLine) -> None:
    """Check override keys and values (every value of a sweep) before Hydra composes or writes anything."""
    for override in command_line.overrides:
        key = override.key_or_group
        if override.is_hydra_override() or override.is_delete():
            continue
        if not (override.is_add() or override.is_force_add() or command_line.custom_primary_config):
            check_top_level_key(key, given=override.input_line or key, extra_known=group_names())
        if override.is_interval_sweep():
            values = [override.value().start, override.value().end]
        elif override.is_sweep_override():
            values = list(override.sweep_iterator())
        else:
            values = [override.value()]
        for value in values:
            check_value(key, value)


def run_hydra(task: Callable[[DictConfig], Any], command_line: CommandLine) -> Any:
    """Run ``task`` under ``hydra.main`` with these arguments: Hydra's flags, its run directory,
    logging and sweeps as users know them. The one place ``sys.argv`` is written (Hydra reads it).

    Hydra composes the config twice per invocation, the first time only to read ``hydra.mode``
    (about 0.1-0.2 s here): upstream issue facebookresearch/hydra#3440. Left as it is."""
    main = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")(task)
    sys.argv = [sys.argv[0], *command_line.arguments]
    return main()
