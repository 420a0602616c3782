"""The project a command runs in: found once at the start of every command, from the folder it runs
in (``runner.config.project``), its code made importable and its default options given to Hydra."""

from pathlib import Path

from runner.config.project import Project, active_project, enter_project, find_project


def enter(start: Path | None = None) -> Project | None:
    """Enter the project ``start`` (default: the working folder) lies in. Outside any project, the
    one a parent runner process named (a worker whose folder is elsewhere); else None."""
    project = find_project(start or Path.cwd()) or active_project()
    if project is not None:
        enter_project(project)
        from runner.cli.hydra_app import store_project_defaults

        store_project_defaults(project)
    return project
