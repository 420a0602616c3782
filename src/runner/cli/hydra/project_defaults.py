"""A project's default options (``[tool.runner] defaults`` in ``pyproject.toml``): the options a group
really has, and Hydra's errors on them said as the project file's."""

import re
from pathlib import Path

from runner.config.project import Project, active_project


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
