"""Where ``logger=[mlflow]`` keeps its runs, checked before the run writes, and made once.

By default the runs share one SQLite store beside the ``outputs/`` folder they lie in (``mlflow.db``,
artifacts in ``mlartifacts/``): the working folder's, or the project's, as MLflow's own default is one
store where the user works and runner's TensorBoard view is one ``outputs/``; so the MLflow UI compares
them. A run outside any ``outputs/`` (``hydra.run.dir=DIR``) keeps its store in its directory (a sweep's
jobs: in the sweep's). MLflow creates a new store's tables on first use, and two processes that do so at
once collide ("table _alembic_tmp_experiments already exists"): a store on this machine is first used
under a file lock beside it, so the jobs of a sweep and runs started together make it once."""

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from urllib.parse import urlparse

from runner.config.errors import UserError

STORE_FILE, ARTIFACTS_DIR = "mlflow.db", "mlartifacts"
OUTPUTS = "outputs"
# The schemes of MLflow's tracking stores (a database through SQLAlchemy, whose URIs may name a driver:
# postgresql+psycopg2), and its servers.
SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "databricks-uc", "uc")
PROFILES = ("databricks", "databricks-uc", "uc")  # a bare name: the default Databricks profile
STORE_HELP = (
    "give sqlite:///PATH/mlflow.db or http://HOST:PORT, or leave it out for mlflow.db beside outputs/"
)


def store_home(run_dir: Path, sweep_dir: Path | None) -> Path:
    """The folder of a run's default store: the one holding the ``outputs/`` the run lies in; else the
    sweep's directory, else the run's."""
    for folder in run_dir.resolve().parents:
        if folder.name == OUTPUTS:
            return folder.parent
    return sweep_dir or run_dir


def local_store(home: Path) -> str:
    return f"sqlite:///{(home / STORE_FILE).resolve()}"


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` store; None for any other."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


def shown(text: str) -> str:
    """``text`` as one line can carry it: quoted, with escapes, where it holds a newline or the like."""
    return text if text.isprintable() else repr(text)


def check_tracking_uri(uri: str) -> None:
    """Refuse in one line a ``mlflow.tracking_uri`` that MLflow would refuse with a traceback, or that
    would lose the run: a folder or a file (MLflow 3 keeps runs in a database or on a server), a scheme
    MLflow does not know, an in-memory or unwritable SQLite store."""
    said = f"mlflow.tracking_uri={shown(uri)}"
    scheme = urlparse(uri).scheme
    if uri in PROFILES:
        return
    if len(scheme) < 2 or scheme == "file":  # a path (C: is a drive)
        raise UserError(f"{said}: a folder or a file is no MLflow store (MLflow keeps runs in a database or "
                        f"on a server); {STORE_HELP}")  # fmt: skip
    if scheme.split("+", 1)[0] not in SCHEMES:
        raise UserError(f"{said}: MLflow has no store of the scheme {scheme}:; it takes {', '.join(SCHEMES)}")
    if scheme != "sqlite":
        return
    path = sqlite_file(uri)
    if path is None or not path.name or path.name == ":memory:":
        raise UserError(f"{said}: an SQLite store in memory is lost when the run ends; {STORE_HELP}")
    folder = path.parent if str(path.parent) else Path(".")
    if path.exists() and not path.is_file():
        raise UserError(f"{said}: {path} is not a file; {STORE_HELP}")
    if not folder.is_dir():
        raise UserError(f"{said}: the folder {folder} does not exist; create it, or {STORE_HELP}")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.R_OK | os.W_OK)):
        raise UserError(f"{said}: runner may not write {path if path.exists() else folder}; {STORE_HELP}")


@contextmanager
def locked(path: Path | None) -> Iterator[None]:
    """An exclusive lock on the file ``path`` (made if needed) while the block runs; none for None. A
    lock file this call made is removed where the block fails: a refused store leaves nothing beside it."""
    if path is None:
        yield
        return
    made = not path.exists()
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        except BaseException:
            if made:
                path.unlink(missing_ok=True)
            raise
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def store_lock(uri: str) -> AbstractContextManager[None]:
    """Held while a store on this machine is first used (its tables made): a lock file beside the
    SQLite file. Servers and other databases make their own tables."""
    path = sqlite_file(uri)
    return locked(path.parent / f".{path.name}.lock" if path is not None else None)


def sweep_lock(sweep_dir: Path | None) -> AbstractContextManager[None]:
    """Held while a sweep's parent run is made or found: its jobs start at once (the joblib launcher)."""
    return locked(sweep_dir / ".mlflow.lock" if sweep_dir is not None else None)
