"""Hydra, through its public API: where runner's configs live, the schema registered with Hydra's
ConfigStore, the checks on overrides before Hydra composes, and running a task under ``hydra.main``."""

import functools
import logging
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import runner.cli.hydra.sweep_job_dirs  # noqa: F401  (the resolvers that name a sweep's job directories)
from runner.checkpoint.durable import NO_SPACE, REFUSED_WRITES, refused_write
from runner.cli.arguments import CommandLine
from runner.cli.exits import exit_with
from runner.cli.hydra.hydra_start import check_folder_names, new_sweep_dir, planned_run_dir
from runner.cli.hydra.suggest import all_options_of, closest_argument, no_such_option, project_defaults_error
from runner.cli.hydra.write_guard import release_folders
from runner.cli.hydra_help import help_without_schemas
from runner.config.checks import check_deletable, check_section_key, check_top_level_key, check_value
from runner.config.errors import ConfigError, UserError
from runner.config.project import Project, active_project
from runner.config.schema import DataConfig, RunConfig
from runner.experiment.undo import remove_new_run_dir
from runner.observe.console import OneLinePerJob


def config_dir() -> Path:
    """``conf/`` inside an installed wheel, else the repository's top-level ``conf/``."""
    package = Path(__file__).resolve().parents[2]  # runner/, three folders up from cli/hydra/
    packaged = package / "conf"
    return packaged if packaged.is_dir() else package.parents[1] / "conf"


CONFIG_DIR = config_dir()
OUTPUT_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")  # where Hydra writes
# A few random characters after the timestamp: runs and sweeps started in the same second get
# their own directories. Cached like Hydra's own ${now:}, so every job of a sweep sees one value.
OmegaConf.register_new_resolver("unique_suffix", lambda: secrets.token_hex(2), use_cache=True, replace=True)
ConfigStore.instance().store(name="runner_schema", node=RunConfig)
ConfigStore.instance().store(group="data", name="data_schema", node=DataConfig)
# What data configs build on: the typed schema, and the run's default metrics, which a data config
# changes as it sets its loss (``- override /metrics@_global_.metrics: none``, conf/data/regression.yaml).
ConfigStore.instance().store(
    group="data",
    name="base_data",
    node={"defaults": ["data_schema", {"/metrics@_global_.metrics": "accuracy"}, "_self_"]},
)
# The logger Hydra's basic launcher (jobs one after another, in this process) logs its lines to; the
# name is its module's, and nothing of it is imported.
BASIC_LAUNCHER_LOG = "hydra._internal.core_plugins.basic_launcher"


def group_names() -> set[str]:
    return {path.name for folder in config_folders(None) for path in folder.iterdir() if path.is_dir()}


def store_project_defaults(project: Project | None) -> None:
    """A project's default options as the config ``runner_project/defaults``, which runner's defaults
    list takes after its own (so ``+experiment=...`` and the command line still choose over it).
    Outside a project there is no such config (the default is optional), or, where an earlier
    ``runner.train`` in this process stored a project's, one that holds none."""
    store = ConfigStore.instance()
    if project is None:
        try:
            store.list("runner_project")
        except OSError:  # none stored in this process: Hydra skips the optional default, at less cost
            return
        store.store(group="runner_project", name="defaults", package="_global_", node={"defaults": []})
        return
    for group, option in project.defaults.items():
        options = options_of(group)
        if option not in options:
            options = all_options_of(group, CONFIG_DIR)
        if option not in options:
            raise ConfigError(
                f'{project.file}: [tool.runner] defaults {group} = "{option}": no such option; '
                f"{group} is one of {', '.join(options) or 'nothing (no such config group)'}"
            )
    overrides = [{f"override /{group}": option} for group, option in project.defaults.items()]
    store.store(group="runner_project", name="defaults", package="_global_", node={"defaults": overrides})


@functools.cache
def group_keys() -> set[str]:
    """The keys runner's config group options set (``optimizer.lr``, ``model.hidden``): what a bare
    ``lr=0.01`` most likely meant. Options placed elsewhere (``# @package _global_``) are left out."""
    import yaml

    keys = set()
    for path in CONFIG_DIR.glob("*/*.yaml"):
        text = path.read_text()
        content = yaml.safe_load(text)
        if "@package" in text.split("\n", 1)[0] or not isinstance(content, dict):
            continue
        keys |= {f"{path.parent.name}.{name}" for name in content if not str(name).startswith("_")}
    return keys - {f"{group}.defaults" for group in group_names()}


def check_command_line(command_line: CommandLine, flags: Iterable[str] = ()) -> None:
    """Check flags (Hydra's, and the command's own ``flags``), override keys and values (every value of
    a sweep) before Hydra composes or writes anything."""
    unknown = command_line.unknown_flags(flags)
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: not a flag; the flags are Hydra's (--help shows them{', and ' if flags else ''}"
            f"{', '.join(flags)}); settings are key=value"
        )
    groups = group_names()
    for override in command_line.overrides:
        key = override.key_or_group
        if "/" in key and not override.is_delete() and override.value() is None:  # hydra/launcher, ...
            raise ConfigError(
                f"{override.input_line}: a config group takes one of its options, not null; to turn a "
                f"setting off, give its key (e.g. {key.replace('/', '.')}=null)"
            )
        if key in OUTPUT_DIR_KEYS and isinstance(override.value(), str):
            check_folder_names(f"{key}={override.value()}", override.value())
        if override.is_hydra_override():
            continue
        if override.is_delete():
            check_deletable(key, given=override.input_line)
            continue
        given = override.input_line or key
        if not (override.is_add() or override.is_force_add() or command_line.custom_primary_config):
            check_top_level_key(key, given=given, extra_known=groups, nested=group_keys)
            check_section_key(key, given=given)
        if key in groups and override.value() is None:
            raise ConfigError(f"{given}: {key} must name one of its options: {', '.join(options_of(key))}")
        if override.is_interval_sweep():
            values = [override.value().start, override.value().end]
        elif override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            values = glob_options(override, command_line)
        elif override.is_sweep_override():
            values = list(override.sweep_iterator())
        else:
            values = [override.value()]
        for value in values:
            check_value(key, value)
            options = options_of(key, command_line) if key in groups else []
            if options and isinstance(value, str) and value not in options:
                raise ConfigError(no_such_option(key, value, options))
    check_cfg_flag(command_line)


def glob_options(override: Override, command_line: CommandLine) -> list[str]:
    """The options of a config group that ``glob(...)`` picks (Hydra expands it only once it composes)."""
    key = override.key_or_group
    if key not in group_names():
        raise ConfigError(
            f"{override.input_line}: glob() picks options of a config group "
            f"({', '.join(sorted(group_names()))}); {key} is a setting: list its values instead ({key}=A,B,C)"
        )
    chosen = override.value().filter(options_of(key, command_line))
    if not chosen:
        raise ConfigError(
            f"{override.input_line}: matches none of the options of {key}: "
            f"{', '.join(options_of(key, command_line))}"
        )
    return chosen


def config_folders(command_line: CommandLine | None) -> list[Path]:
    """runner's config folder, and those on the command line's ``hydra.searchpath``."""
    from runner.config.trust import searchpath_folders

    searchpath = command_line.last("hydra.searchpath") if command_line else None
    entries = searchpath.value() if searchpath is not None else []
    project = active_project()
    folders = searchpath_folders(entries if isinstance(entries, list) else [entries])
    return [CONFIG_DIR, *([project.conf] if project is not None else []), *folders]


def options_of(group: str, command_line: CommandLine | None = None) -> list[str]:
    """A config group's options: runner's, and those in the command line's ``hydra.searchpath``."""
    folders = config_folders(command_line)
    return sorted({path.stem for folder in folders for path in (folder / group).glob("*.yaml")})


MODES = {"-m": "--multirun", "--multirun": "--multirun", "-c": "--cfg", "--cfg": "--cfg", "-i": "--info",
         "--info": "--info", "-r": "--run", "--run": "--run", "-sc": "--shell-completion",
         "--shell-completion": "--shell-completion"}  # fmt: skip


def check_cfg_flag(command_line: CommandLine) -> None:
    """``--cfg`` takes job, hydra or all (Hydra's argument parser would print its usage instead); one
    mode at a time (Hydra would raise)."""
    arguments = list(command_line.arguments)
    modes = sorted({MODES[name] for name in (a.partition("=")[0] for a in arguments) if name in MODES})
    if len(modes) > 1:
        raise ConfigError(f"{' and '.join(modes)}: give one of them (--multirun runs a sweep; --cfg, --info "
                          "show the config or Hydra's setup without running)")  # fmt: skip
    for index, argument in enumerate(arguments):
        name, _, value = argument.partition("=")
        if name in ("--cfg", "-c"):
            value = value or (arguments[index + 1] if index + 1 < len(arguments) else "")
            if value not in ("job", "hydra", "all"):
                raise ConfigError(f"--cfg {value or '(nothing)'}: --cfg takes job, hydra or all")


def trusted_targets(command_line: CommandLine) -> set[str]:
    """The ``_target_``s this command line names: in runner's configs, in the config folders on its
    ``hydra.searchpath``, and in its overrides."""
    from runner.config.trust import folder_targets, targets_in

    folders = config_folders(command_line)
    trusted = set().union(*(folder_targets(folder) for folder in folders))
    for override in command_line.overrides:
        if override.is_sweep_override():
            continue
        key, value = override.key_or_group, override.value()
        trusted |= {str(value)} if key.endswith("_target_") else {t for _, t in targets_in(value)}
    return trusted


def composition_error(error: Exception, command_line: CommandLine | None = None) -> str:
    """Hydra's multi-line message for a config it could not compose, as one line."""
    text = str(error)
    project = active_project()
    if project is not None and "In 'runner_project/defaults'" in text:  # the project's defaults
        return project_defaults_error(project, text)
    group = re.search(r"Available options in '([^']+)'", text)
    if isinstance(error, MissingConfigException) and error.missing_cfg_file and group and error.options:
        option = error.missing_cfg_file.removeprefix(group[1] + "/")
        return no_such_option(group[1], option, list(error.options))
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        return f"there is no config {error.missing_cfg_file} (is its folder on hydra.searchpath?)"
    unknown = re.match(r"Could not override '([^']+)'.\s*To append to your config use (\S+)", text)
    if unknown:
        section, _, name = unknown[1].rpartition(".")
        given = command_line.last(section) if command_line is not None else None
        closest = closest_argument(name, section, config_folders(command_line), given)
        if closest is not None:
            return (f"{unknown[1]}: {section} has no key {name}; did you mean {section}.{closest[0]} (an "
                    f"argument of {closest[1]})? To add {name} anyway, use {unknown[2]}")  # fmt: skip
        return f"{unknown[1]}: {section} has no key {name}; to add one, use {unknown[2]}"
    lines = [line.strip() for line in text.split("Config search path")[0].splitlines() if line.strip()]
    if isinstance(error.__cause__, OmegaConfBaseException):
        lines.insert(1, str(error.__cause__).splitlines()[0])
    return "; ".join(line.rstrip(".") for line in lines if not line.startswith("See https://"))


def run_hydra(task: Callable[[DictConfig], Any], command_line: CommandLine) -> Any:
    """Run ``task`` under ``hydra.main`` with these arguments: Hydra's flags, its run directory,
    logging and sweeps as users know them. The one place ``sys.argv`` is written (Hydra reads it).

    Until the task starts, Hydra raises its errors (``HYDRA_FULL_ERROR``, documented) instead of
    printing several lines: a config it cannot compose and a run directory it cannot write become one
    line each. Once the task runs, errors from the user's code are shown as Hydra shows them.

    Hydra composes the config twice per invocation, the first time only to read ``hydra.mode``
    (about 0.1-0.2 s here): upstream issue facebookresearch/hydra#3440. Left as it is."""
    preset = os.environ.get("HYDRA_FULL_ERROR")
    started = False

    @functools.wraps(task)  # Hydra names the job (and its log file) after the task's module
    def started_task(cfg: DictConfig) -> Any:
        nonlocal started
        started = True
        restore_environment("HYDRA_FULL_ERROR", preset)
        # Python's warnings through logging, as Hydra set it up: into train.log too, above a progress
        # bar, marked with a sweep job's number.
        logging.captureWarnings(True)
        return task(cfg)

    main = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")(started_task)
    sys.argv = [sys.argv[0], *command_line.arguments]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    one_line_per_job = OneLinePerJob()
    logging.getLogger(BASIC_LAUNCHER_LOG).addFilter(one_line_per_job)
    try:
        if command_line.has_flag("--help") or command_line.has_flag("-h"):
            return help_without_schemas(main)
        return main()
    except HydraException as error:  # composing, sweeping: before any job runs
        if started:
            raise
        exit_with(ConfigError(composition_error(error, command_line)))
    except UserError as error:  # a sweeper's settings (jobs report their own errors)
        exit_with(error)
    except OmegaConfBaseException as error:  # a launcher resolving Hydra's settings, before the task
        if started:
            raise
        release_folders()  # its lock first: then a sweep directory holds only Hydra's record of it
        for sweep_dir in new_sweep_dir:  # made for this sweep, holding only Hydra's record of it
            if sweep_dir.is_dir() and {path.name for path in sweep_dir.iterdir()} <= {"multirun.yaml"}:
                (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
                remove_new_run_dir(sweep_dir, keep=Path.cwd())
        exit_with(ConfigError(resolution_error(error)))
    except (OSError, ValueError) as error:  # Hydra writing its record, or opening the job's log file
        refused = error if isinstance(error, OSError) else refused_write(error)
        if started or refused is None or (refused.filename is None and refused.errno not in REFUSED_WRITES):
            raise
        exit_with(ConfigError(hydra_write_error(refused)))
    finally:
        release_folders()
        logging.getLogger(BASIC_LAUNCHER_LOG).removeFilter(one_line_per_job)
        restore_environment("HYDRA_FULL_ERROR", preset)


def resolution_error(error: OmegaConfBaseException) -> str:
    """``hydra.sweep.subdir: ValueError raised while resolving interpolation: ...`` in one line."""
    key = getattr(error, "full_key", None)
    return f"{key + ': ' if key else ''}{str(error).splitlines()[0]}"


def hydra_write_error(error: OSError) -> str:
    """A write Hydra could not make before the task (its record, the log file) as one line; the run
    directory it was making is removed if it holds only what Hydra wrote (a full disk leaves 0-byte
    files there)."""
    output_dir = planned_run_dir[-1] if planned_run_dir else None
    if output_dir is not None:
        remove_new_run_dir(output_dir, keep=Path.cwd())
    place = Path(error.filename) if error.filename is not None else output_dir or Path.cwd()
    reason = error.strerror
    if place.is_symlink() and not place.exists():
        reason = f"it is a link to {os.readlink(place)}, which does not exist"
    if error.errno in NO_SPACE:
        advice = "free space, or choose another place with hydra.run.dir=DIR (hydra.sweep.dir=DIR for sweeps)"
    else:
        advice = ("run from a folder where runner may write outputs/, or choose one with hydra.run.dir=DIR "
                  "(hydra.sweep.dir=DIR for sweeps)")  # fmt: skip
    return f"cannot write {place}: {reason}; {advice}"


def restore_environment(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# The project's defaults, in the processes runner starts too (joblib and submitit workers compose there).
store_project_defaults(active_project())
