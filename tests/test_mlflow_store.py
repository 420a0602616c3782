"""``logger=[mlflow]``'s store: by default one SQLite store beside the ``outputs/`` the runs lie in, made
once however many runs start at once; a ``mlflow.tracking_uri`` MLflow would refuse is one line before
the run writes; and a run stopped by a signal ends KILLED, to be resumed."""

import json
import multiprocessing
import signal
from pathlib import Path

import pytest
from conftest import TINY
from mlflow import MlflowClient
from omegaconf import OmegaConf

from runner.cli.hydra.hydra_start import prepare_mlflow
from runner.cli.main import main
from runner.observe.mlflow_store import check_tracking_uri
from runner.observe.mlflow_tracker import opened_store

SIGNALLED = "+callbacks.stop._target_=signals_itself.SignalsAtStep"


def test_runs_share_one_store_beside_outputs_and_a_stopped_run_ends_killed(train_here, tmp_path):
    """Two runs under ``outputs/`` are two runs of one store in the folder that holds it (the MLflow UI
    compares them, as TensorBoard's view of ``outputs/`` does); the one stopped by SIGTERM is KILLED."""
    outputs = tmp_path / "outputs"
    finished = train_here(*TINY, "logger=[tensorboard,mlflow]", "trainer.max_steps=2", run_dir=outputs / "a")
    with pytest.raises(SystemExit) as stopped:
        train_here(
            *TINY, "logger=[tensorboard,mlflow]", "trainer.max_steps=6", SIGNALLED, run_dir=outputs / "b"
        )
    assert stopped.value.code == 128 + signal.SIGTERM
    assert not (finished / "mlflow.db").exists()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("runner").experiment_id])
    assert {run.info.run_name: run.info.status for run in runs} == {"a": "FINISHED", "b": "KILLED"}
    assert {run.info.run_name: run.data.tags["runner.status"] for run in runs} == {"a": "ok", "b": "stopped"}

    # A sweep's process makes its parent run in the same store before any job starts.
    sweep_dir = outputs / "multirun" / "2026-12-07" / "s"
    settings = {"tracking_uri": None, "experiment": "runner"}
    config = OmegaConf.create({"logger": ["tensorboard", "mlflow"], "mlflow": settings})
    prepare_mlflow(config, sweep_dir)
    (parent,) = [run for run in client.search_runs([runs[0].info.experiment_id]) if run.info.run_name == "s"]
    assert parent.data.tags["runner.sweep_dir"] == str(sweep_dir) and parent.info.status == "RUNNING"
    assert json.loads((sweep_dir / "mlflow_sweep.json").read_text())["run_id"] == parent.info.run_id


def make_store(uri: str, home: str, barrier) -> None:
    barrier.wait()
    opened_store(uri, "runner", Path(home), None)


def test_runs_that_start_at_once_make_their_new_store_once(tmp_path):
    """Two processes open one new store at the same moment (a joblib sweep's jobs, two runs started
    together): both start, where MLflow alone has one fail with "table ... already exists"."""
    context = multiprocessing.get_context("fork")  # mlflow and runner imported already
    barrier = context.Barrier(2)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    processes = [context.Process(target=make_store, args=(uri, str(tmp_path), barrier)) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0, 0]


@pytest.mark.parametrize(
    "uri", ["databricks", "http://127.0.0.1:5000", "postgresql+psycopg2://u@h/db", "sqlite:///mlflow.db"]
)
def test_the_tracking_uris_mlflow_takes_pass_the_check(uri, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_tracking_uri(uri)


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("{tmp}", "a folder or a file is no MLflow store"),
        ("{tmp}/notes.txt", "a folder or a file is no MLflow store"),
        ("file://{tmp}", "a folder or a file is no MLflow store"),
        ("foo://host/x", "MLflow has no store of the scheme foo:"),
        ('"foo://a\nb"', "mlflow.tracking_uri='foo://a\\nb': MLflow has no store of the scheme foo:"),
        ("sqlite://", "an SQLite store in memory is lost when the run ends"),
        ("sqlite:///{tmp}/missing/mlflow.db", "the folder {tmp}/missing does not exist"),
        ("sqlite:///{tmp}", "is not a file"),
        ("sqlite:///{tmp}/notes.txt", "(sqlite3.DatabaseError) file is not a database"),
        (
            "sqlite:////proc/mlflow.db",
            "cannot start an MLflow run at mlflow.tracking_uri=sqlite:////proc/mlflow.db",
        ),
    ],
)
def test_a_tracking_uri_mlflow_refuses_is_one_line_and_leaves_no_run_folder(
    uri, says, tmp_path, monkeypatch, capsys
):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(work)
    uri = uri.format(tmp=tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", *TINY, "logger=[tensorboard,mlflow]", f"mlflow.tracking_uri={uri}"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        ("runner: error: logger=mlflow: cannot start", "runner: error: mlflow.tracking_uri=")
    )
    assert says.format(tmp=tmp_path) in line
    assert list(work.iterdir()) == [] and (tmp_path / "notes.txt").read_text() == "mine\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "work"]  # no lock file left


def test_a_tracking_uri_mlflow_refuses_is_named_before_the_model_is_built(tmp_path, monkeypatch, capsys):
    """Refused at once, not after the data and the model are built (seconds of a run's start)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", *TINY, "logger=[mlflow]", "mlflow.tracking_uri=foo://host/x", "model.hidden=[-1]"])
    assert exited.value.code == 2
    assert "MLflow has no store of the scheme foo:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
