"""logger=[tensorboard,mlflow,wandb,csv]: each tracker gets the scalars the event file gets, at the same
steps, the config as parameters and the result, read back with the trackers' own clients (a real
``mlflow server``, W&B's offline run file, the CSV file)."""

import csv
import json
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, job_dir, read_scalars, run_cli
from mlflow import MlflowClient

from runner.observe.csv_tracker import CSV_FILE

FLOAT32 = np.float32  # TensorBoard keeps each scalar as a float32


def as_logged(series: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(step, float(FLOAT32(value))) for step, value in series]


def csv_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    with open(run_dir / CSV_FILE, newline="") as handle:
        for row in csv.DictReader(handle):
            found.setdefault(row["tag"], []).append((int(row["step"]), float(row["value"])))
    return found


def mlflow_scalars(client: MlflowClient, run_id: str, tags: list[str]) -> dict[str, list[tuple[int, float]]]:
    return {
        tag: sorted((metric.step, metric.value) for metric in client.get_metric_history(run_id, tag))
        for tag in tags
    }


def test_mlflow_and_csv_get_tensorboards_scalars_the_config_and_the_result(train_here):
    """The default MLflow store is a SQLite file in the run directory; the MLflow run holds every
    scalar at every step TensorBoard has (the same float32 values), the flattened config as
    parameters, and the result's status and best value; metrics.csv holds the same scalars."""
    run_dir = train_here(*TINY, "logger=[tensorboard,mlflow,csv]", "trainer.max_steps=6")
    expected = read_scalars(run_dir)
    assert {"train/loss", "train/grad_norm", "train/lr", "val/loss", "val/loss_best"} <= set(expected)

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("runner").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    logged = mlflow_scalars(client, run.info.run_id, list(expected))
    assert {tag: as_logged(series) for tag, series in logged.items()} == expected
    assert run.data.params["optimizer.lr"] == "0.001" and run.data.params["data.batch_size"] == "16"
    assert run.data.params["trainer.max_steps"] == "6" and run.data.params["seed"] == "0"
    best = expected["val/loss_best"][-1][1]
    assert float(FLOAT32(float(run.data.tags["runner.best"]))) == best
    assert run.data.tags["runner.status"] == "ok" and run.data.tags["runner.monitor"] == "val/loss"
    assert json.loads((run_dir / "trackers.json").read_text())["mlflow"]["run_id"] == run.info.run_id

    assert {tag: as_logged(series) for tag, series in csv_scalars(run_dir).items()} == expected


def test_a_resumed_run_continues_its_mlflow_run(train_here):
    """Resumed for longer (trainer.max_steps=4, then 6), the run logs on into the same MLflow run, which
    ends finished with every step TensorBoard has; its parameters keep their first values."""
    run_dir = train_here(*TINY, "logger=[mlflow]")
    train_here(*TINY, "logger=[mlflow]", "trainer.max_steps=6", f"resume={run_dir}", run_dir=run_dir)
    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("runner").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["runner.status"] == "ok"
    expected = read_scalars(run_dir)
    assert [step for step, _ in expected["train/loss"]] == [1, 2, 3, 4, 5, 6]
    logged = mlflow_scalars(client, run.info.run_id, ["train/loss", "val/loss_best"])
    assert {tag: as_logged(series) for tag, series in logged.items()} == {
        tag: expected[tag] for tag in logged
    }
    assert run.data.params["trainer.max_steps"] == "4"


def test_a_resumed_run_drops_the_csv_rows_past_its_checkpoint_as_tensorboard_drops_its_events(train_here):
    """The interrupted run logged steps 4-6 past the checkpoint of step 3; the resumed run logs them
    again: metrics.csv holds each step once, the resumed run's, as TensorBoard shows it."""
    overrides = (*TINY, "logger=[csv]", "trainer.max_steps=6", "checkpoint.every_n_steps=3",
                 "checkpoint.keep_last=5")  # fmt: skip
    run_dir = train_here(*overrides)
    train_here(*overrides, f"resume={run_dir / 'checkpoints' / 'step_00000003.pt'}", run_dir=run_dir)
    expected = read_scalars(run_dir)
    assert [step for step, _ in expected["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert {tag: as_logged(series) for tag, series in csv_scalars(run_dir).items()} == expected


def wandb_records(run_dir: Path) -> list:
    """The records of W&B's offline run file (``run-<id>.wandb``), read with W&B's own protobuf
    messages: a header (":W&B", magic, version), then LevelDB-log framed records in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, block, at, pending, records = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while at + 7 <= len(data):
        left = block - at % block
        if left < 7:  # too little room for a header: the rest of the block is padding
            at += left
            continue
        _, length, kind = struct.unpack("<IHB", data[at : at + 7])
        if kind == 0:
            at += left
            continue
        pending += data[at + 7 : at + 7 + length]
        at += 7 + length
        if kind in (1, 4):  # a whole record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_offline_gets_tensorboards_scalars_the_config_and_the_result(train_here, monkeypatch):
    """With no network (wandb.mode=offline), the W&B run under the run directory holds every scalar
    at every step TensorBoard has, the flattened config and, in its summary, the best value."""
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    run_dir = train_here(*TINY, "logger=[wandb]", "wandb.mode=offline", "trainer.max_steps=6")
    expected = read_scalars(run_dir)
    records = wandb_records(run_dir)
    history: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}  # fmt: skip
            for tag, value in items.items():
                if not tag.startswith("_"):
                    history.setdefault(tag, []).append((items["_step"], value))
    assert {tag: as_logged(series) for tag, series in history.items()} == expected
    (run,) = [record.run for record in records if record.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["optimizer.lr"] == 0.001 and config["trainer.max_steps"] == "6"
    assert run.display_name == run_dir.name
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary |= {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.summary.update}  # fmt: skip
    assert float(FLOAT32(summary["runner/best"])) == expected["val/loss_best"][-1][1]
    assert summary["runner/status"] == "ok"
    (exit_record,) = [record.exit for record in records if record.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0


def test_a_sweeps_jobs_are_one_wandb_group_named_after_the_sweep(train_here, tmp_path, monkeypatch):
    """Two jobs of a sweep (its directory marked by Hydra's multirun.yaml), offline: each is a W&B run
    named after its job's directory, in the group named after the sweep's directory."""
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    for job, lr in enumerate(["0.001", "0.01"]):
        train_here(
            *TINY, f"optimizer.lr={lr}", "logger=[wandb]", "wandb.mode=offline", run_dir=sweep / str(job)
        )
    runs = [
        record.run
        for job in ("0", "1")
        for record in wandb_records(sweep / job)
        if record.WhichOneof("record_type") == "run"
    ]
    assert [(run.display_name, run.run_group) for run in runs] == [("0", "sweep"), ("1", "sweep")]
    assert runs[0].run_id != runs[1].run_id


@pytest.mark.parametrize("name", ["mlflow", "wandb"])
def test_a_tracker_that_is_not_installed_is_refused_in_one_line_and_nothing_is_written(
    name, tmp_path, monkeypatch, capsys
):
    from runner.cli.main import main

    monkeypatch.setitem(sys.modules, name, None)  # what Python does for a module it cannot import
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", *TINY, f"logger=[tensorboard,{name}]"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"runner: error: logger=[tensorboard,{name}]: {name} is not installed; install it with "
        f'pip install "runner[{name}]" (or pip install {name}), or leave {name} out of logger'
    )
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_logger_is_refused_naming_the_ones_there_are(tmp_path, monkeypatch, capsys):
    from runner.cli.main import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", *TINY, "logger=[tensorboard,comet]"])
    assert exited.value.code == 2
    assert "logger must be a list of tensorboard, mlflow, wandb, csv" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on loopback, with its own SQLite store and artifact folder."""
    port, home = free_port(), tmp_path / "server"
    home.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{home / 'store.db'}", "--artifacts-destination",
         str(home / "artifacts"), "--workers", "1"],
        cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("mlflow server did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_a_sweep_is_one_parent_run_with_a_child_per_job_on_a_real_mlflow_server(mlflow_server, tmp_path):
    """``-m optimizer.lr=0.01,0.001`` with mlflow.tracking_uri at a server: the sweep is one parent run,
    finished once the sweep ended, with one child run per job, named by its directory, holding the
    scalars TensorBoard has for that job."""
    result = run_cli(
        "train", "-m", "optimizer.lr=0.01,0.001", *TINY, "logger=[tensorboard,mlflow]",
        f"mlflow.tracking_uri={mlflow_server}", "mlflow.experiment=sweeps", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").glob("*/*")
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("sweeps")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    assert parent.info.run_name == sweep_dir.name and parent.info.status == "FINISHED"
    children = {run.info.run_name: run for run in runs if run is not parent}
    assert len(children) == 2
    for number, lr in [(0, "0.01"), (1, "0.001")]:
        job = job_dir(sweep_dir, number)
        child = children[job.name]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED" and child.data.params["optimizer.lr"] == lr
        expected = read_scalars(job)
        logged = mlflow_scalars(client, child.info.run_id, list(expected))
        assert {tag: as_logged(series) for tag, series in logged.items()} == expected
