"""``python -m runner init NAME``: a new project folder (``runner.tools.scaffold``)."""

from pathlib import Path

from runner.cli.exits import exit_with
from runner.config.errors import ConfigError, UserError

INIT_HELP = """usage: python -m runner init NAME

Makes the folder NAME, a project of your own: a package (src/NAME/) with a model and a data set that
learn, their configs (conf/model/, conf/data/), a pyproject.toml whose [tool.runner] table lets every
runner command that builds them find them from this folder or below (no PYTHONPATH, no
hydra.searchpath), a README and a test. NAME is the project's name and its package's (- and . as _):
ASCII letters, digits, - _ and ., starting with a letter and ending with a letter or digit. Refuses a
folder that exists and is not empty, a folder inside a run's folder, and a name that is importable
already (torch, yaml, json, ...). init . makes the project in the working folder, named after it.
"""


def main_init(arguments: list[str]) -> None:
    if any(argument in ("-h", "--help") for argument in arguments):
        print(INIT_HELP, end="")
        raise SystemExit(0)
    from runner.tools.scaffold import create_project

    try:
        if len(arguments) != 1 or arguments[0].startswith("-") or "=" in arguments[0]:
            got = " ".join(arguments) or "nothing"
            raise ConfigError(f"init takes one name, the new project's folder; got {got}")
        folder = Path(arguments[0])
        written = create_project(folder)
    except UserError as error:
        exit_with(error)
    except OSError as error:
        exit_with(ConfigError(f"init {arguments[0]}: cannot write {error.filename}: {error.strerror}"))
    if folder.resolve() == Path.cwd().resolve():
        print(f"wrote {len(written)} files for the project {folder.resolve().name} here; then:\n"
              "  python -m runner train")  # fmt: skip
        return
    shown = folder if folder.is_absolute() else Path(arguments[0])
    print(f"wrote {len(written)} files in {shown}/; then:\n  cd {shown}\n  python -m runner train")
