"""What ``tensorboard --logdir`` shows of runner's runs, read from a real TensorBoard server and, where
the order is the browser's, from the page a headless chromium draws: the tag groups a person opens the
Scalars tab for come first, and runs keep unique, readable names."""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import TINY, read_scalars, run_cli
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from test_hparams import TensorBoard

from runner.observe.events import tf_record
from runner.tools.job_files import read_scalars as report_scalars


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


@pytest.mark.slow
def test_tensorboard_on_outputs_names_each_run_uniquely_and_readably(tmp_path):
    """Two runs started together and a sweep: ``tensorboard --logdir outputs`` names each run
    by its directory, so single runs are their date and time (and a suffix), a sweep's jobs their
    sweep's, their number and what they swept, listed in job order."""
    command = [sys.executable, "-m", "runner", "train", *TINY]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [
        subprocess.Popen(command, cwd=tmp_path, env=environment, stderr=subprocess.PIPE) for _ in range(2)
    ]
    sweep = run_cli("train", "-m", "optimizer.lr=0.001,0.01", "seed=0,1", *TINY, cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    for run in runs:
        assert run.wait(timeout=240) == 0, run.stderr.read()
    server = TensorBoard(tmp_path / "outputs")
    try:
        names = list(wait_for_runs(server, 6))
    finally:
        server.stop()
    singles = [name for name in names if not name.startswith("multirun/")]
    jobs = [name.rsplit("/", 1) for name in names if name.startswith("multirun/")]
    assert len(singles) == 2 and len(set(singles)) == 2
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-[0-9a-f]{4}", name) for name in singles), singles
    assert len({sweep_dir for sweep_dir, _ in jobs}) == 1
    assert sorted(job for _, job in jobs) == [
        "000_optimizer.lr=0.001,seed=0", "001_optimizer.lr=0.001,seed=1",
        "002_optimizer.lr=0.01,seed=0", "003_optimizer.lr=0.01,seed=1",
    ]  # fmt: skip
