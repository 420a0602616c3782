"""``logger=[mlflow]``: the run as an MLflow run, through MLflow's public client (``MlflowClient``).

Where: ``mlflow.tracking_uri``, or by default one SQLite store (``mlflow.db``, artifacts in
``mlartifacts/``) beside the ``outputs/`` the runs lie in (``runner.observe.mlflow_store``), which
``mlflow ui`` run in that folder shows. A sweep is one parent run (named
after the sweep's directory) with a child run per job (MLflow's nested runs); the sweep's process
marks the parent finished when the last job has ended (``end_sweep_parent``).

The run gets the whole config as parameters (flattened, ``optimizer.lr``), every scalar the event file
gets at the same step, the run plan as ``run_plan.txt``, and at its end its status and the monitored
metric's best value and step as tags. A resumed run continues the same MLflow run: MLflow keeps every
point, so one the interrupted run logged past its checkpoint stays beside the resumed run's.
"""

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from mlflow.environment_variables import (
    MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR,
    MLFLOW_HTTP_REQUEST_BACKOFF_JITTER,
    MLFLOW_HTTP_REQUEST_MAX_RETRIES,
    MLFLOW_HTTP_REQUEST_TIMEOUT,
)
from mlflow.exceptions import MlflowException

from runner.checkpoint.durable import write_text
from runner.config.bounded_read import read_bounded
from runner.config.errors import UserError
from runner.observe.mlflow_store import (
    ARTIFACTS_DIR,
    check_tracking_uri,
    local_store,
    shown,
    sqlite_file,
    store_home,
    store_lock,
    sweep_lock,
)

log = logging.getLogger("runner")
SWEEP_PARENT_FILE = "mlflow_sweep.json"  # in a sweep's directory: its parent run, and where it is
SWEEP_TAG = "runner.sweep_dir"
STATUSES = {"ok": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}
MAX_VALUE = 6000  # MLflow's limit on a parameter's value
# MLflow's client waits 120 s for an answer and retries a server that went away 7 times, about four
# minutes in all; runner's defaults (MLflow's documented settings, unless the user set them) make a
# dead server a failed call within seconds. The trackers' thread stops waiting sooner still.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "5", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}


def longest_call_seconds(uri: str) -> float | None:
    """The longest one call of MLflow's HTTP client may take under its limits: each try's connect and
    read timeouts, and urllib3's backoff before each retry but the first (at most 120 s, plus the
    jitter). None for a store that is no server (its calls wait on no network)."""
    if not uri.startswith(("http://", "https://")):
        return None
    timeout, retries = MLFLOW_HTTP_REQUEST_TIMEOUT.get(), MLFLOW_HTTP_REQUEST_MAX_RETRIES.get()
    factor, jitter = MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get(), MLFLOW_HTTP_REQUEST_BACKOFF_JITTER.get()
    backoffs = sum(min(120.0, factor * 2 ** (retry - 1) + jitter) for retry in range(2, retries + 1))
    return (retries + 1) * 2 * timeout + backoffs


def experiment_id_of(client: MlflowClient, name: str, artifacts: Path | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = artifacts.resolve().as_uri() if artifacts is not None else None
    return client.create_experiment(name, artifact_location=location)


def sweep_parent(client: MlflowClient, experiment_id: str, sweep_dir: Path, uri: str) -> str:
    """The id of the sweep's parent run: made by the sweep's process before its jobs start, found by
    them (and by a resumed sweep's) in ``mlflow_sweep.json``."""
    path = sweep_dir / SWEEP_PARENT_FILE
    try:
        recorded = json.loads(read_bounded(path))
    except (OSError, ValueError, RecursionError):
        recorded = {}
    if not isinstance(recorded, dict) or not isinstance(recorded.get("run_id"), str):
        recorded = {}  # damaged or forged: the sweep gets a parent run of its own
    if recorded.get("tracking_uri") == uri and recorded.get("experiment_id") == experiment_id:
        client.update_run(recorded["run_id"], status="RUNNING")
        return recorded["run_id"]
    parent = client.create_run(
        experiment_id, run_name=sweep_dir.name, tags={SWEEP_TAG: str(sweep_dir.resolve())}
    )
    write_text(path, json.dumps({"tracking_uri": uri, "experiment_id": experiment_id,
                                 "run_id": parent.info.run_id}, indent=2))  # fmt: skip
    return parent.info.run_id


def params_of(hparams: Mapping[str, float | str | bool]) -> dict[str, str]:
    return {key: (str(value).lower() if isinstance(value, bool) else str(value))[:MAX_VALUE]
            for key, value in hparams.items()}  # fmt: skip


def recorded_store(earlier: dict[str, Any]) -> str | None:
    """The store a resumed run logged to, if it is a SQLite file that is still there (a run from before
    stores were shared has its own): the run continues there. A server's address read from a run's folder
    is not followed: ``mlflow.tracking_uri`` names it again."""
    uri = earlier.get("tracking_uri")
    path = sqlite_file(uri) if isinstance(uri, str) else None
    return uri if path is not None and path.is_file() else None


def opened_store(
    uri: str, experiment: str, home: Path, sweep_dir: Path | None
) -> tuple[MlflowClient, str, str | None]:
    """A client of the store at ``uri``, checked first; the experiment's id, and a sweep's parent run,
    made under the store's lock (and the sweep's), so that runs and jobs starting at once make each
    once. A store this call began and could not make is removed."""
    check_tracking_uri(uri)
    for name, value in HTTP_LIMITS.items():
        os.environ.setdefault(name, value)
    artifacts = home / ARTIFACTS_DIR if uri == local_store(home) else None
    store = sqlite_file(uri)
    try:
        with sweep_lock(sweep_dir), store_lock(uri):
            existed = store is None or store.exists()
            try:
                client = MlflowClient(tracking_uri=uri)
                experiment_id = experiment_id_of(client, experiment, artifacts)
                parent = sweep_parent(client, experiment_id, sweep_dir, uri) if sweep_dir else None
            except BaseException:
                if not existed and store is not None:
                    store.unlink(missing_ok=True)
                raise
    except Exception as error:  # MLflow's, SQLAlchemy's (a full disk), the OS's: none is the run's
        raise cannot_start(uri, error) from None
    return client, experiment_id, parent


def cannot_start(uri: str, error: Exception) -> UserError:
    lines = [line for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return UserError(
        f"logger=mlflow: cannot start an MLflow run at mlflow.tracking_uri={shown(uri)}: {lines[0]}"
    )


def prepare_sweep(sweep_dir: Path, tracking_uri: str | None, experiment: str) -> None:
    """A sweep's store and parent run, made by the sweep's process before any job starts."""
    home = store_home(sweep_dir / "job", sweep_dir)
    uri = tracking_uri or local_store(home)
    check_tracking_uri(uri)
    made = not sweep_dir.exists()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    try:
        opened_store(uri, experiment, home, sweep_dir)
    except UserError:
        if made:  # nothing of the sweep's is left: the lock file, the folder
            (sweep_dir / ".mlflow.lock").unlink(missing_ok=True)
            sweep_dir.rmdir()
        raise


class MlflowTracker:
    name = "mlflow"

    def __init__(self, start: Any) -> None:
        settings, sweep_dir = start.settings, start.sweep_dir
        home = store_home(start.run_dir, sweep_dir)
        uri = settings.tracking_uri or recorded_store(start.earlier) or local_store(home)
        self.client, experiment_id, parent = opened_store(uri, settings.experiment, home, sweep_dir)
        try:
            self.run_id = self._run(start, experiment_id, parent, uri)
            self._log_params(params_of(start.hparams))
        except Exception as error:  # MLflow's, SQLAlchemy's (a full disk), the OS's: none is the run's
            raise cannot_start(uri, error) from None
        self.uri, self.parent = uri, parent
        self.record = {"tracking_uri": uri, "experiment_id": experiment_id, "run_id": self.run_id}
        log.info("mlflow: run %s in experiment %s at %s", self.run_id, settings.experiment, uri)

    def _run(self, start: Any, experiment_id: str, parent: str | None, uri: str) -> str:
        earlier = start.earlier
        if earlier.get("tracking_uri") == uri and earlier.get("run_id"):
            self.client.update_run(earlier["run_id"], status="RUNNING")
            return earlier["run_id"]
        tags = {"runner.run_dir": str(start.run_dir.resolve())}
        if parent is not None:
            tags["mlflow.parentRunId"] = parent  # MLflow's tag for a nested run
        return self.client.create_run(experiment_id, run_name=start.run_dir.name, tags=tags).info.run_id

    def _log_params(self, params: dict[str, str]) -> None:
        """A resumed run keeps the values it was logged with (MLflow refuses to change one); the run's
        ``run.yaml`` says what the resume changed."""
        logged = self.client.get_run(self.run_id).data.params
        new = [Param(key, value) for key, value in params.items() if key not in logged]
        for at in range(0, len(new), 100):  # MLflow takes at most 100 per batch
            self.client.log_batch(self.run_id, params=new[at : at + 100])

    @property
    def longest_call_seconds(self) -> float | None:
        return longest_call_seconds(self.client.tracking_uri)

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [Metric(tag, float(value), now, step) for tag, value in scalars.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def log_text(self, tag: str, text: str) -> None:
        self.client.log_text(self.run_id, text, f"{tag.replace('/', '_')}.txt")

    def finish(self, status: str, result: Mapping[str, Any]) -> None:
        for key in ("monitor", "best", "best_step"):
            if result.get(key) is not None:
                self.client.set_tag(self.run_id, f"runner.{key}", str(result[key]))
        self.client.set_tag(self.run_id, "runner.status", status)
        self.client.set_terminated(self.run_id, STATUSES.get(status, "FINISHED"))

    def close(self) -> None:
        pass


def end_sweep_parent(sweep_dir: Path, failed: bool) -> None:
    """Mark a sweep's parent run finished (or failed), once its jobs have ended."""
    path = sweep_dir / SWEEP_PARENT_FILE
    try:
        recorded = json.loads(read_bounded(path))
        client = MlflowClient(tracking_uri=recorded["tracking_uri"])
        client.set_terminated(recorded["run_id"], "FAILED" if failed else "FINISHED")
    except (OSError, ValueError, KeyError, TypeError, RecursionError, MlflowException) as error:
        log.warning("could not mark the sweep's MLflow parent run finished: %s", error)
