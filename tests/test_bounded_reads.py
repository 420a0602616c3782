"""What a resume reads back from a run's folder (``metrics.csv``, ``trackers.json``, ``result.json``) is
read only from a plain file, with a bound on its size and in time that does not grow with it: a FIFO or a
folder in its place is one line, never a hang or a traceback, and a file of gigabytes (made sparse here:
the bytes are never written) costs neither memory nor minutes. A tracker whose server stops answering
holds the run up for seconds, then is left out with one warning."""

import logging
import os
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import TINY
from mlflow import MlflowClient

from runner.cli.main import main
from runner.config.errors import UserError
from runner.observe.csv_tracker import CSV_FILE
from runner.observe.hparams import HPARAMS_FILE
from runner.observe.mlflow_tracker import MlflowTracker
from runner.observe.records import recorded_result
from runner.observe.sweep_hparams import session_hparams
from runner.observe.trackers import TRACKERS_FILE, Loggers, Trackers, open_trackers, recorded_trackers
from runner.observe.writer import NullLogger

GIGABYTES_3 = 3 * 10**9
ROW = "{step},train/loss,0.5,1.0\r\n"


def rows(steps: range) -> str:
    return "".join(ROW.format(step=step) for step in steps)


def resumed_csv(run_dir: Path, at: int) -> None:
    for tracker in open_trackers(["tensorboard", "csv"], run_dir, {}, None, resumed_at=at):
        tracker.close()


@pytest.mark.parametrize("name", [CSV_FILE, TRACKERS_FILE])
@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
def test_a_fifo_a_folder_or_a_link_in_place_of_a_record_is_one_line(tmp_path, name, kind):
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("step,tag,value,wall_time\r\n")
        path.symlink_to(tmp_path / "elsewhere")
    finished = threading.Event()
    errors: list[BaseException] = []

    def resume() -> None:
        try:
            resumed_csv(tmp_path, 3)
        except BaseException as error:
            errors.append(error)
        finished.set()

    threading.Thread(target=resume, daemon=True).start()
    assert finished.wait(20), "the resume hangs"
    (error,) = errors
    assert isinstance(error, UserError) and "\n" not in str(error)
    assert str(path) in str(error) and ("not a plain file" in str(error) or "a link" in str(error))


def test_a_new_metrics_csv_is_a_plain_file_with_a_header(tmp_path):
    for tracker in open_trackers(["csv"], tmp_path, {}, None, resumed_at=None):
        tracker.close()
    assert (tmp_path / CSV_FILE).stat().st_mode & 0o111 == 0  # not executable: made as open() makes files
    assert (tmp_path / CSV_FILE).read_text() == "step,tag,value,wall_time\n"


def test_a_resume_drops_the_rows_past_its_checkpoint_of_a_3_gb_csv_without_reading_it(tmp_path):
    """The rows to drop are the file's last: they are found from its end, and the file is cut there."""
    path = tmp_path / CSV_FILE
    with open(path, "w", newline="") as handle:
        handle.write("step,tag,value,wall_time\r\n" + rows(range(1, 4)))
        handle.seek(GIGABYTES_3)
        handle.write(rows(range(4, 10)))
    tracemalloc.start()
    started = time.monotonic()
    resumed_csv(tmp_path, 6)
    seconds, (_, peak) = time.monotonic() - started, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 5 and peak < 20 << 20
    assert path.stat().st_size == GIGABYTES_3 + len(rows(range(4, 7)))
    with open(path, "rb") as handle:
        handle.seek(GIGABYTES_3)
        assert handle.read().decode() == rows(range(4, 7))


def test_a_3_gb_csv_of_one_line_is_kept_and_the_next_row_starts_a_line(tmp_path):
    path = tmp_path / CSV_FILE
    with open(path, "w") as handle:
        handle.write("step,tag,value,wall_time\r\n7")
        handle.truncate(GIGABYTES_3)
    tracemalloc.start()
    resumed_csv(tmp_path, 6)
    assert tracemalloc.get_traced_memory()[1] < 20 << 20
    tracemalloc.stop()
    assert path.stat().st_size == GIGABYTES_3 + 2  # the line it ended with, ended


def test_a_3_gb_trackers_json_is_refused_in_one_line_without_reading_it(tmp_path):
    with open(tmp_path / TRACKERS_FILE, "w") as handle:
        handle.truncate(GIGABYTES_3)
    with pytest.raises(UserError, match=r"trackers.json: it is 3,000,000,000 bytes, more than the 1,048,576"):
        resumed_csv(tmp_path, 3)


def test_a_forged_trackers_json_hands_each_tracker_only_a_record(tmp_path):
    """What a tracker continues comes from a file in the run's folder: one entry that is not a record
    (a number, a list) is no tracker run to continue, rather than a traceback in the tracker."""
    (tmp_path / TRACKERS_FILE).write_text('{"mlflow": 5, "wandb": [1], "csv": {"file": "metrics.csv"}}')
    assert recorded_trackers(tmp_path) == {"csv": {"file": "metrics.csv"}}
    (tmp_path / TRACKERS_FILE).write_text("[1, 2]")
    assert recorded_trackers(tmp_path) == {}


def test_a_fifo_or_a_3_gb_hparams_record_of_another_run_is_no_record(tmp_path):
    """Each run's end reads the HParams records of every run under its ``outputs/`` (the all-runs
    columns): one that is a FIFO, or 3 GB, is a run without settings, not a hang or 3 GB read."""
    os.mkfifo(tmp_path / HPARAMS_FILE)
    assert session_hparams(tmp_path) == {}
    os.unlink(tmp_path / HPARAMS_FILE)
    with open(tmp_path / HPARAMS_FILE, "w") as handle:
        handle.truncate(GIGABYTES_3)
    tracemalloc.start()
    assert session_hparams(tmp_path) == {}
    assert tracemalloc.get_traced_memory()[1] < 20 << 20
    tracemalloc.stop()


def test_a_fifo_or_a_3_gb_result_json_reads_as_no_result(tmp_path):
    os.mkfifo(tmp_path / "result.json")
    assert recorded_result(tmp_path) == {}
    os.unlink(tmp_path / "result.json")
    with open(tmp_path / "result.json", "w") as handle:
        handle.truncate(GIGABYTES_3)
    assert recorded_result(tmp_path) == {}


@pytest.fixture
def silent_server():
    """A real server on loopback that takes connections and never answers: a tracking server that
    hung, or whose machine went away."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def trackers_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "trackers"]


def test_a_tracking_server_that_stops_answering_holds_the_run_up_seconds_then_is_left_out(
    tmp_path, silent_server, caplog, monkeypatch
):
    """An MLflow run whose server stops answering mid-run: the checkpoint's wait for the trackers ends
    after ``answer_seconds``, with one warning, and the run's later calls cost nothing. The client has
    HTTP limits, as runner gives it (``mlflow_tracker.HTTP_LIMITS``, shorter here): the run's end waits
    out the call that did not answer within them, so that no thread of the run goes on retrying and
    logging into the next run's ``train.log``."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    assert trackers_threads() == []
    tracker = MlflowTracker.__new__(MlflowTracker)  # its run started; then the server stops answering
    tracker.client, tracker.run_id = MlflowClient(tracking_uri=silent_server), "0" * 32
    trackers = Trackers([tracker], answer_seconds=1.0)
    loggers = Loggers(NullLogger(), trackers)
    loggers.log_scalars(1, {"train/loss": 0.5})
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="runner"):
        loggers.flush()
        loggers.log_scalars(2, {"train/loss": 0.4})
        trackers.finish("ok", {})
        loggers.close()
    assert time.monotonic() - started < 4
    (warning,) = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.startswith(
        "logger mlflow did not answer within 1 s and is left out for the rest of the run"
    )
    assert trackers_threads() == [], "a tracker call goes on after the run ended"


def test_a_resume_refused_for_a_fifo_metrics_csv_leaves_its_train_log_as_it_was(
    tmp_path, monkeypatch, capsys
):
    """The trackers open before the run plan is logged: a refused resume writes nothing in the run."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    main(["train", *TINY, "logger=[tensorboard,csv]", f"hydra.run.dir={run_dir}"])
    (run_dir / CSV_FILE).unlink()
    os.mkfifo(run_dir / CSV_FILE)
    log = (run_dir / "train.log").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["train", f"resume={run_dir}", "trainer.max_steps=6"])
    assert exited.value.code == 2
    assert "logger=csv: cannot write" in capsys.readouterr().err
    assert (run_dir / "train.log").read_bytes() == log
