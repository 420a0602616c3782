"""What TensorBoard's HParams tab shows: every run's whole config, compared across runs, and the runs'
own scalars as its metrics (no one-point charts of their own)."""

import json
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import TINY, composed, read_scalars, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from runner.config.typed import as_dict, flatten
from runner.observe.hparams import HPARAMS_FILE, hparams_of
from runner.training.engine import NonFiniteError


@dataclass
class Record:
    session_start_info: plugin_data_pb2.SessionStartInfo
    session_end_info: plugin_data_pb2.SessionEndInfo


def recorded(run_dir: Path) -> Record:
    """The run's session record as TensorBoard's reader keeps it (the first one of each tag it reads)."""
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    contents = accumulator.PluginTagToContent("hparams")
    parse = plugin_data_pb2.HParamsPluginData.FromString
    return Record(
        parse(contents["_hparams_/session_start_info"]).session_start_info,
        parse(contents["_hparams_/session_end_info"]).session_end_info,
    )


def value_of(value):
    return getattr(value, value.WhichOneof("kind"))


def test_hparams_are_the_whole_config_flattened():
    config = as_dict(composed("model.hidden=[32,16]", "seed=null"))
    hparams = hparams_of(config, seed=1234)
    # Not resume (a pointer to a file), not the null settings: a "null" text among numbers would make
    # TensorBoard's column text, and its filter would hide the runs that have a number.
    nulls = {key for key, value in flatten(config).items() if value is None} - {"seed"}
    assert "trainer.max_steps" in nulls
    assert set(hparams) == set(flatten(config)) - {"resume"} - nulls
    assert hparams["model.hidden"] == "[32, 16]" and hparams["clip"] == 1.0 and hparams["compile"] is False
    assert hparams["seed"] == 1234  # the seed the run drew, not null


def test_a_run_records_its_config_and_its_end_for_the_hparams_tab(train_here):
    run_dir = train_here(*TINY, "trainer.val_every_n_steps=1")
    data = recorded(run_dir)
    config = as_dict(composed(*TINY, "trainer.val_every_n_steps=1"))
    start = {name: value_of(value) for name, value in data.session_start_info.hparams.items()}
    assert start == {key: value if not isinstance(value, int) or isinstance(value, bool) else float(value)
                     for key, value in hparams_of(config, seed=0).items()}  # fmt: skip
    assert data.session_end_info.status == api_pb2.STATUS_SUCCESS
    # Its file sorts before the run's event file: TensorBoard keeps the first record it reads.
    assert sorted(path.name for path in run_dir.glob("events.out.tfevents.*"))[0] == HPARAMS_FILE

    scalars = read_scalars(run_dir)
    assert not [tag for tag in scalars if not tag.startswith(("train/", "val/", "perf/"))]
    losses = [value for _, value in scalars["val/loss"]]
    best = [value for _, value in scalars["val/loss_best"]]
    assert best == pytest.approx([min(losses[: i + 1]) for i in range(len(losses))])
    assert [step for step, _ in scalars["val/loss_best"]] == [1, 2, 3, 4]


def test_a_resume_replaces_the_record_and_adds_no_second_point(train_here):
    run_dir = train_here(*TINY, "trainer.val_every_n_steps=1")
    first = recorded(run_dir).session_start_info.hparams["trainer.max_steps"].number_value
    last = run_dir / "checkpoints" / "last.pt"
    assert torch.load(last)["global_step"] == 4
    train_here(*TINY, "trainer.val_every_n_steps=1", "trainer.max_steps=6", f"resume={last}", run_dir=run_dir)
    data = recorded(run_dir)
    assert (first, data.session_start_info.hparams["trainer.max_steps"].number_value) == (4, 6)
    assert data.session_end_info.status == api_pb2.STATUS_SUCCESS
    scalars = read_scalars(run_dir)
    assert [step for step, _ in scalars["val/loss_best"]] == [1, 2, 3, 4, 5, 6]


BLOWS_UP = (*TINY, "optimizer=sgd", "optimizer.lr=1e30", "clip=null", "trainer.val_every_n_steps=1")


def test_a_run_whose_validation_is_never_finite_has_no_best_and_still_ends(train_here):
    run_dir = train_here(*BLOWS_UP, "on_nonfinite=off")
    scalars = read_scalars(run_dir)
    assert len(scalars["val/loss"]) == 4 and "val/loss_best" not in scalars
    assert recorded(run_dir).session_end_info.status == api_pb2.STATUS_SUCCESS


def test_a_failed_run_ends_with_a_failure_in_the_hparams_tab(train_here, tmp_path):
    with pytest.raises(NonFiniteError):
        train_here(*BLOWS_UP)
    assert recorded(tmp_path / "run").session_end_info.status == api_pb2.STATUS_FAILURE


class TensorBoard:
    """A real ``tensorboard`` on loopback, on a port the system picks, read over HTTP."""

    def __init__(self, logdir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", "0", "--reload_interval", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for line in self.process.stderr:
            if found := re.search(r"http://127\.0\.0\.1:(\d+)/", line):
                self.url = f"http://127.0.0.1:{found[1]}"
                return
        raise AssertionError("tensorboard did not start")

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.load(response)

    def experiment(self, runs: int) -> dict:
        """The HParams tab's experiment, once TensorBoard has read ``runs`` runs' records."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            groups = self.session_groups([])
            if len(groups) >= runs:
                return self.post("/data/plugin/hparams/experiment", {"experimentName": ""})
            time.sleep(0.5)
        raise AssertionError(f"tensorboard read {len(groups)} of {runs} runs' records")

    def session_groups(self, hparams: list[str]) -> list[dict]:
        body = {
            "experimentName": "", "startIndex": 0, "sliceSize": 100,
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [{"hparam": name} for name in hparams],
        }  # fmt: skip
        return self.post("/data/plugin/hparams/session_groups", body).get("sessionGroups", [])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.mark.slow
def test_tensorboard_compares_the_runs_of_a_sweep_by_what_differs(tmp_path):
    """A 2x2 sweep, one job resumed for longer, read as a person's browser reads it from a real
    TensorBoard server: each job's end reaches a server that is running; the swept keys (and the
    resumed job's longer max_steps) with both values come first, the constants are marked as such,
    the metrics are the runs' own scalars."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    watching = TensorBoard(sweep)  # as a person watches a sweep: started before it
    try:
        result = run_cli("train", "-m", "optimizer.lr=0.001,0.01", "seed=0,1", *TINY,
                         "trainer.val_every_n_steps=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr
        watching.experiment(runs=4)
        deadline = time.monotonic() + 30  # each job's end reaches the running server
        while time.monotonic() < deadline:
            statuses = [group["sessions"][0]["status"] for group in watching.session_groups([])]
            if statuses == ["STATUS_SUCCESS"] * 4:
                break
            time.sleep(0.5)
        assert statuses == ["STATUS_SUCCESS"] * 4
    finally:
        watching.stop()
    resumed = run_cli("train", f"resume={sweep / '3'}", "trainer.max_steps=6", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr

    server = TensorBoard(sweep)  # a server started after the resume reads its new record
    try:
        experiment = server.experiment(runs=4)
        infos = {info["name"]: info for info in experiment["hparamInfos"]}
        assert set(infos) >= {"optimizer.lr", "seed", "trainer.max_steps", "model.hidden", "data.batch_size"}
        differing = [info["name"] for info in experiment["hparamInfos"] if info.get("differs")]
        assert differing == ["optimizer.lr", "seed", "trainer.max_steps"]  # shown first, the rest hidden
        assert experiment["hparamInfos"][:3] == [infos[name] for name in differing]
        assert infos["optimizer.lr"]["domainInterval"] == {"minValue": 0.001, "maxValue": 0.01}
        assert infos["seed"]["domainInterval"] == {"minValue": 0.0, "maxValue": 1.0}
        assert infos["trainer.max_steps"]["domainInterval"] == {"minValue": 4.0, "maxValue": 6.0}
        metrics = [info["name"]["tag"] for info in experiment["metricInfos"]]
        assert "val/loss_best" in metrics and not [tag for tag in metrics if tag.startswith("hparams/")]

        groups = server.session_groups(["optimizer.lr", "seed", "trainer.max_steps"])
        seen = {}
        for group in groups:
            (session,) = group["sessions"]
            job = Path(session["name"]).name
            values = {metric["name"]["tag"]: metric["value"] for metric in session["metricValues"]}
            seen[job] = (group["hparams"], values, session["status"])
        assert {(h["optimizer.lr"], h["seed"]) for h, _, _ in seen.values()} == {
            (lr, seed) for lr in (0.001, 0.01) for seed in (0.0, 1.0)
        }
        assert seen["3"][0]["trainer.max_steps"] == 6 and seen["0"][0]["trainer.max_steps"] == 4
        assert all(status == "STATUS_SUCCESS" for _, _, status in seen.values())
        for job, (_, values, _) in seen.items():
            best = json.loads((sweep / job / "result.json").read_text())["best"]
            assert values["val/loss_best"] == pytest.approx(best, rel=1e-6)

        tags = server.get("/data/plugin/scalars/tags")
        for run, run_tags in tags.items():
            assert all(tag.startswith(("train/", "val/", "perf/")) for tag in run_tags), run
    finally:
        server.stop()
