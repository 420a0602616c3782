"""What runner tells a user whose config choice Hydra refuses, in one line: an option a group lacks,
with the options it has (and those Hydra's plugins register); a project's default options
(``[tool.runner] defaults`` in ``pyproject.toml``), Hydra's errors on them said as the project file's;
and a key the chosen ``_target_`` does not take (``optimizer.learning_rate``), with the closest of its
arguments (``optimizer.lr``) from the target's signature and its config's keys. The target is one a
config folder names (runner's or the project's), so importing it runs nothing the run would not."""

import contextlib
import re
from pathlib import Path

import yaml
from hydra.core.override_parser.types import Override
from hydra.utils import get_object

from runner.config.closest import argument_names, closest_name
from runner.config.project import Project, active_project


def option_file(group: str, folders: list[Path], given: Override | None) -> Path | None:
    """The file of the option ``group`` takes: given on the command line, the project's default, or
    runner's (its ``config.yaml``, the first folder's)."""
    option = given.value() if given is not None else None
    project = active_project()
    if option is None and project is not None:
        option = project.defaults.get(group)
    if option is None:
        listed = yaml.safe_load((folders[0] / "config.yaml").read_text()).get("defaults", [])
        option = next((entry[group] for entry in listed if isinstance(entry, dict) and group in entry), None)
    if not isinstance(option, str):
        return None
    found = [folder / group / f"{option}.yaml" for folder in folders]
    return next((path for path in found if path.is_file()), None)


def closest_argument(
    name: str, group: str, folders: list[Path], given: Override | None
) -> tuple[str, str] | None:
    """The argument of the chosen option's ``_target_`` closest to ``name`` (an abbreviation either
    way, ``learning_rate`` for ``lr``, or a near spelling), and the target; None where none is close."""
    option = option_file(group, folders, given) if "." not in group else None
    if option is None:
        return None
    try:
        content = yaml.safe_load(option.read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(content, dict) or not isinstance(content.get("_target_"), str):
        return None
    target = content["_target_"]
    candidates = [str(key) for key in content if not str(key).startswith("_") and key != "defaults"]
    with contextlib.suppress(Exception):  # a target that cannot be imported here: its config's keys
        candidates += argument_names(get_object(target))
    closest = closest_name(name, candidates)
    return (closest, target) if closest else None


def all_options_of(group: str, config_dir: Path) -> list[str]:
    """A config group's options as Hydra composes them: the config folders' and those Hydra's plugins
    register (``hydra/launcher``: basic, joblib, submitit_local, ...)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    state = GlobalHydra.instance()
    running = state.hydra if state.is_initialized() else None  # a job's (a worker's), or an earlier run's
    state.clear()
    try:
        with initialize_config_dir(str(config_dir), version_base="1.3"):
            return sorted(state.config_loader().get_group_options(group))
    finally:
        if running is not None:
            state.initialize(running)


def project_defaults_error(project: Project, text: str) -> str:
    """Hydra's error on a project's default options, naming ``pyproject.toml`` and its key."""
    first = text.split("Config search path")[0].replace("In 'runner_project/defaults':", "").strip()
    first = first.splitlines()[0].rstrip(".") if first else "Hydra could not compose it"
    group = re.search(r"Could not override '([^']+)'", first)
    if group and group[1] in project.defaults and "No match in the defaults list" in first:
        name, option = group[1], project.defaults[group[1]]
        return (
            f'{project.file}: [tool.runner] defaults {name} = "{option}": {name} is no group of '
            "runner's defaults list (conf/config.yaml), so a project cannot choose its option; give it on "
            f"the command line ({name}={option}), or remove it from defaults"
        )
    return f"{project.file}: [tool.runner] defaults: {first}"


def no_such_option(group: str, option: str, options: list[str]) -> str:
    """An option the group lacks; outside any project, where the option is likely a project's own
    (``model=small_gru`` typed in the wrong folder), also that no project was found, and where runner
    looked."""
    said = f"{group}={option}: no such option; {group} is one of {', '.join(options)}"
    if active_project() is not None or group.startswith("hydra/"):
        return said
    here = str(Path.cwd())
    here = here if here.isprintable() else repr(here)  # a folder's name may hold a newline
    return (
        f"{said}; no project was found from {here} (runner looks for a pyproject.toml with [tool.runner] "
        "in the working folder and each folder above it)"
    )
