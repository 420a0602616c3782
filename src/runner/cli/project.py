"""The project a command runs in: found at the start of the commands that compose a config (from the
folder they run in, ``runner.config.project``), its default options given to Hydra and, for those that
build the user's model or data, its code made importable."""

from pathlib import Path

from runner.config.errors import ConfigError
from runner.config.project import Project, active_project, enter_project, find_project

# The commands that build the user's model or data: only these import a project's code. report,
# consolidate and init read or write files and import none of it; nor does any command's --help.
BUILDS_USER_CODE = ("train", "eval", "export", "doctor", "lr_find", "verify-resume")


def enter(start: Path | None = None, code_importable: bool = True) -> Project | None:
    """Enter the project ``start`` (default: the working folder) lies in. Outside any project, the
    one a parent runner process named (a worker whose folder is elsewhere); else None (and no project's
    defaults are left from an earlier one in this process)."""
    if start is None:
        try:
            start = Path.cwd()
        except OSError:  # the working folder was removed under the shell
            raise ConfigError(
                "the folder runner was started in no longer exists; cd to a folder that does, and run the "
                "command again"
            ) from None
    project = find_project(start) or active_project()
    if project is not None:
        enter_project(project, code_importable)
    from runner.cli.hydra.hydra_app import store_project_defaults

    store_project_defaults(project)
    return project
