"""What ``tensorboard --logdir`` shows of runner's runs, read from a real TensorBoard server and, where
the order is the browser's, from the page a headless chromium draws: the tag groups a person opens the
Scalars tab for come first, and runs keep unique, readable names."""

import re
import shutil
import subprocess
import time

import pytest
from conftest import TINY, read_scalars
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from test_hparams import TensorBoard

from runner.observe.events import tf_record
from runner.tools.report import read_scalars as report_scalars


def drawn_page(url: str) -> str:
    """The page as chromium draws it once its scripts ran (the DOM, not the HTML served)."""
    done = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def wait_for_runs(server: TensorBoard, count: int) -> dict:
    """The Time Series dashboard's runs and their scalar tags, once the server has read ``count`` runs."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = server.get("/data/plugin/timeseries/tags")["scalars"]["runTagInfo"]
        if len(runs) >= count:
            return runs
        time.sleep(0.5)
    raise AssertionError(f"tensorboard read {len(runs)} of {count} runs")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs a headless chromium")
def test_time_series_lists_train_and_val_before_the_vitals(train_here, tmp_path):
    """TensorBoard groups a run's scalars by the part of the tag before the first ``/`` and lists the
    groups by name: throughput and memory (``vitals/``) come after the training and validation curves."""
    run_dir = train_here(*TINY, "trainer.val_every_n_steps=2")
    assert "vitals/samples_per_sec" in read_scalars(run_dir)
    server = TensorBoard(tmp_path)
    try:
        (tags,) = wait_for_runs(server, 1).values()
        assert "vitals/samples_per_sec" in tags and not [tag for tag in tags if tag.startswith("perf/")]
        page = drawn_page(f"{server.url}/#timeseries")
    finally:
        server.stop()
    groups = re.findall(r'class="group-title" title="([^"]*)"', page)
    assert groups == ["train", "val", "vitals"]


def test_an_older_runs_perf_tags_read_as_vitals(tmp_path):
    """A run written before the rename logged ``perf/samples_per_sec``: report reads it by today's name."""
    summary = Summary(value=[Summary.Value(tag="perf/samples_per_sec", simple_value=512.0)])
    events = [Event(file_version="brain.Event:2"), Event(wall_time=2.0, step=3, summary=summary)]
    (tmp_path / "events.out.tfevents.1.older").write_bytes(
        b"".join(tf_record(event.SerializeToString()) for event in events)
    )
    scalars = report_scalars(tmp_path)
    assert list(scalars) == ["vitals/samples_per_sec"]
    assert [(event.step, event.value) for event in scalars["vitals/samples_per_sec"]] == [(3, 512.0)]
