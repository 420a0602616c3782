"""A user's project: the nearest ``pyproject.toml`` with a ``[tool.runner]`` table, found as pytest and
ruff find theirs. The project file is the user's own code and trusted as such: its config folder goes on
Hydra's search path and its code on the import path. A run directory never names either."""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runner.config.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads no project file
    tomllib = None

PROJECT_FILE = "pyproject.toml"
# The project runner found, handed to the processes it starts (joblib and submitit workers, a
# resume's command): its root folder.
PROJECT_ENV = "RUNNER_PROJECT"
KEYS = {"conf": "the config folder (default conf)", "code": "the folder holding the code (default src)",
        "defaults": "the config groups' default options, e.g. {model = \"my_net\"}"}  # fmt: skip


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
    included, that has a ``[tool.runner]`` table; None outside any project."""
    if tomllib is None:
        return None
    for folder in [start.resolve(), *start.resolve().parents]:
        path = folder / PROJECT_FILE
        if not path.is_file():
            continue
        table = read_table(path)
        if table is not None:
            return project_of(folder, table)
    return None


def read_table(path: Path) -> dict | None:
    try:
        content = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot be read ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error})") from None
    table = content.get("tool", {}).get("runner") if isinstance(content.get("tool"), dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.runner must be a table ([tool.runner])")
    return table


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
    return Project(root, folders["conf"], folders["code"], dict(defaults))


def active_project() -> Project | None:
    """The project this process works in, as runner's command line (or ``runner.train``) found it and
    handed it on to the processes it starts."""
    root = os.environ.get(PROJECT_ENV)
    if not root or tomllib is None:
        return None
    table = read_table(Path(root) / PROJECT_FILE)
    return project_of(Path(root), table) if table is not None else None


def enter_project(project: Project) -> None:
    """Make the project's code importable here and in the processes this one starts (``PYTHONPATH``:
    joblib and submitit workers, torchrun's ranks), and name the project to them."""
    code = str(project.code)
    if code not in sys.path:
        sys.path.insert(0, code)
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if code not in entries:
        os.environ["PYTHONPATH"] = os.pathsep.join([code, *entries])
    os.environ[PROJECT_ENV] = str(project.root)


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
