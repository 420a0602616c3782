"""A user's project: the nearest ``pyproject.toml`` with a ``[tool.runner]`` table, found as pytest and
ruff find theirs. The project file is the user's own code and trusted as such: its config folder goes on
Hydra's search path and, for the commands that build the user's model or data, its code on the import
path. A run directory never names either: a folder that holds a run (or lies inside one) is no project,
whatever it carries; and a code folder that would hide a library (``yaml.py``, ``torch/``) is refused."""

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runner.config.errors import ConfigError
from runner.config.project_file import runner_table
from runner.config.project_trust import PROJECT_ENV, check_trusted, hidden_modules, inside, startup_files

PROJECT_FILE = "pyproject.toml"
KEYS = {"conf": "the config folder (default conf)", "code": "the folder holding the code (default src)",
        "defaults": "the config groups' default options, e.g. {model = \"my_net\"}"}  # fmt: skip
# What a run leaves in its folder (runner.experiment.run_files, Hydra's record, a sweep's record).
RUN_RECORDS = ("run.yaml", "data_split.json", "result.json", "multirun.yaml")
EVENTS_PREFIX = "events.out.tfevents."
GROUP_NAME = r"[A-Za-z_][\w-]*(/[A-Za-z_][\w-]*)*"  # model, hydra/launcher; never ../


@dataclass(frozen=True)
class Project:
    """Where a project keeps its configs and its code, and the options it picks by default."""

    root: Path
    conf: Path
    code: Path
    defaults: dict[str, str] = field(default_factory=dict)

    @property
    def file(self) -> Path:
        return self.root / PROJECT_FILE


def find_project(start: Path) -> Project | None:
    """The project ``start`` (a folder) lies in: the nearest ``pyproject.toml`` above it, itself
    included, that has a ``[tool.runner]`` table, above every folder of the way that holds a run; None
    outside any project. One found above ``start`` that another user may have written is refused
    (``runner.config.project_trust``)."""
    folders = [start.resolve(), *start.resolve().parents]
    runs = [index for index, folder in enumerate(folders) if holds_a_run(folder)]
    for folder in folders[: runs[-1] + 1] if runs else []:
        if (folder / PROJECT_FILE).exists():
            print(f"runner: warning: not reading {folder / PROJECT_FILE}: {folders[runs[-1]]} holds a run, "
                  "and a run's folder is never a project", file=sys.stderr)  # fmt: skip
            break
    for folder in folders[runs[-1] + 1 :] if runs else folders:
        table = read_table(folder / PROJECT_FILE)
        if table is not None:
            check_trusted(folder, start, [folder, folder / PROJECT_FILE])
            project = project_of(folder, table)
            check_trusted(folder, start, inside([project.conf, project.code]))
            return project
    return None


def holds_a_run(folder: Path) -> bool:
    """Whether ``folder`` is a run's or a sweep's: what it carries (a ``pyproject.toml``, a ``conf/``)
    came with the run, from whoever made it, and is data."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    if any(name in RUN_RECORDS or name.startswith(EVENTS_PREFIX) for name in names):
        return True
    if ".hydra" in names and (folder / ".hydra").is_dir():
        return True
    return "checkpoints" in names and holds_checkpoints(folder / "checkpoints")


def holds_checkpoints(folder: Path) -> bool:
    """A run's ``checkpoints/``: ``last.pt``, ``best.pt``, ``step_*`` (a folder of pretrained weights
    of the user's own is not one)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(name in ("last.pt", "best.pt") or name.startswith("step_") for name in names)


def read_table(path: Path) -> dict | None:
    """The ``[tool.runner]`` table of the project file ``path`` (``runner.config.project_file``)."""
    return runner_table(path)


def project_of(root: Path, table: dict) -> Project:
    """The project a ``[tool.runner]`` table describes; a key it does not know, or a folder that is
    not there, is refused in one line naming the file."""
    path = root / PROJECT_FILE
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        known = "; ".join(f"{key}: {what}" for key, what in KEYS.items())
        raise ConfigError(f"{path}: [tool.runner] has no key {unknown[0]}; it takes {known}")
    folders = {}
    for key, default in (("conf", "conf"), ("code", "src")):
        value = table.get(key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{path}: [tool.runner] {key} = {value!r}: give a folder, relative to {root}")
        folders[key] = (root / value).resolve()
    if not folders["conf"].is_dir():
        raise ConfigError(
            f"{path}: [tool.runner] names the config folder {folders['conf']}, which does not exist; "
            'create it, or set conf = "FOLDER"'
        )
    if "code" not in table and not folders["code"].is_dir():
        folders["code"] = root  # the package sits next to pyproject.toml
    defaults = table.get("defaults", {})
    if not isinstance(defaults, dict) or not all(isinstance(v, str) for v in defaults.values()):
        raise ConfigError(
            f"{path}: [tool.runner] defaults must map config groups to options, e.g. "
            'defaults = {model = "my_net", data = "my_data"}'
        )
    odd = [group for group in defaults if not re.fullmatch(GROUP_NAME, group)]
    if odd:
        raise ConfigError(
            f"{path}: [tool.runner] defaults {odd[0]!r}: a config group is a name or a path of names inside "
            'the config folders (model, data, hydra/launcher), e.g. defaults = {model = "my_net"}'
        )
    return Project(root, folders["conf"], folders["code"], dict(defaults))


def active_project() -> Project | None:
    """The project this process works in, as runner's command line (or ``runner.train``) found it and
    handed it on to the processes it starts."""
    root = os.environ.get(PROJECT_ENV)
    if not root:
        return None
    table = read_table(Path(root) / PROJECT_FILE)
    return project_of(Path(root), table) if table is not None else None


def enter_project(project: Project, code_importable: bool = True) -> None:
    """Name the project to this process and those it starts (its config folder, its defaults) and,
    with ``code_importable``, make its code importable here and there (``PYTHONPATH``: joblib and
    submitit workers, torchrun's ranks), once it is checked to hide no other module."""
    os.environ[PROJECT_ENV] = str(project.root)
    if not code_importable:
        return
    check_code_folder(project)
    code = str(project.code)
    if code not in sys.path:
        sys.path.insert(0, code)
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if code not in entries:
        os.environ["PYTHONPATH"] = os.pathsep.join([code, *entries])


def check_code_folder(project: Project) -> None:
    """A module of the code folder that would hide the standard library's, an installed package's or
    one this process imported from elsewhere (another project's package of the same name) is refused
    in one line naming both; so is a file Python would run at the start of every process the folder is
    on the ``PYTHONPATH`` of (``sitecustomize.py``: every joblib worker, every torchrun rank)."""
    startup = startup_files(project.code)
    if startup:
        raise ConfigError(
            f"{project.file}: [tool.runner] code: the code folder {project.code} holds {startup[0].name}, "
            "which Python would run at the start of every process runner starts (the folder is on their "
            f"PYTHONPATH); runner does not start processes with it: move it out of {project.code}"
        )
    hidden = hidden_modules(project.code)
    if hidden:
        name, path, elsewhere = hidden[0]
        again = "imported already" in elsewhere
        raise ConfigError(
            f"{project.file}: [tool.runner] code: the code folder {project.code} holds {path.name}, which "
            f"would hide {name} ({elsewhere}): every import of {name} would run it instead; rename it or "
            f"move it out of {project.code}"
            + (f", or start a new Python process (this one imported {name} from elsewhere)" if again else "")
        )


def user_pythonpath() -> str:
    """``PYTHONPATH`` as the user set it: without the project's code folder runner added."""
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    project = os.environ.get(PROJECT_ENV)
    added = set()
    if project:
        try:
            found = active_project()
        except ConfigError:
            found = None
        added = {str(found.code)} if found is not None else set()
    return os.pathsep.join(entry for entry in entries if entry not in added)
