"""What TensorBoard's HParams tab shows: every run's whole config, compared across runs, and the runs'
own scalars as its metrics (no one-point charts of their own)."""

import json
import re
import shutil
import struct
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import TINY, composed, job_dir, read_scalars, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from runner.config.typed import as_dict, flatten
from runner.observe.hparams import HPARAMS_FILE, hparams_of
from runner.observe.sweep_hparams import EXPERIMENT_FILE, sweep_experiment
from runner.training.nonfinite import NonFiniteError


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
    assert hparams["seed"] == "1234"  # the seed the run drew, not null; an integer, printed as one
    assert hparams["data.batch_size"] == "32" and hparams["optimizer.lr"] == 0.001


def test_a_run_records_its_config_and_its_end_for_the_hparams_tab(train_here):
    run_dir = train_here(*TINY, "trainer.val_every_n_steps=1")
    data = recorded(run_dir)
    config = as_dict(composed(*TINY, "trainer.val_every_n_steps=1"))
    start = {name: value_of(value) for name, value in data.session_start_info.hparams.items()}
    assert start == hparams_of(config, seed=0)
    assert data.session_end_info.status == api_pb2.STATUS_SUCCESS
    # Its file sorts before the run's event file: TensorBoard keeps the first record it reads.
    assert sorted(path.name for path in run_dir.glob("events.out.tfevents.*"))[0] == HPARAMS_FILE

    scalars = read_scalars(run_dir)
    assert not [tag for tag in scalars if not tag.startswith(("train/", "val/", "vitals/"))]
    losses = [value for _, value in scalars["val/loss"]]
    best = [value for _, value in scalars["val/loss_best"]]
    assert best == pytest.approx([min(losses[: i + 1]) for i in range(len(losses))])
    assert [step for step, _ in scalars["val/loss_best"]] == [1, 2, 3, 4]


def test_a_resume_replaces_the_record_and_adds_no_second_point(train_here):
    run_dir = train_here(*TINY, "trainer.val_every_n_steps=1")
    first = recorded(run_dir).session_start_info.hparams["trainer.max_steps"].string_value
    last = run_dir / "checkpoints" / "last.pt"
    assert torch.load(last)["global_step"] == 4
    train_here(*TINY, "trainer.val_every_n_steps=1", "trainer.max_steps=6", f"resume={last}", run_dir=run_dir)
    data = recorded(run_dir)
    assert (first, data.session_start_info.hparams["trainer.max_steps"].string_value) == ("4", "6")
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
    TensorBoard server: each job's end reaches a server that is running; the columns are the swept
    keys (and the resumed job's longer max_steps) with their values, no constants; the metrics are the
    runs' own val scalars, the monitor's best first."""
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
        assert list(infos) == ["optimizer.lr", "seed", "trainer.max_steps"]  # no constants
        assert all(info["differs"] for info in infos.values())
        assert infos["optimizer.lr"]["domainInterval"] == {"minValue": 0.001, "maxValue": 0.01}
        assert infos["seed"]["domainDiscrete"] == ["0", "1"]  # integers, printed as integers
        assert infos["trainer.max_steps"]["domainDiscrete"] == ["4", "6"]
        metrics = [info["name"]["tag"] for info in experiment["metricInfos"]]
        assert metrics == ["val/loss_best", "val/loss", "val/acc"]

        groups = server.session_groups(["optimizer.lr", "seed", "trainer.max_steps"])
        seen = {}
        for group in groups:
            (session,) = group["sessions"]
            job = int(Path(session["name"]).name.split("_")[0])  # 003_optimizer.lr=0.01,seed=1: job 3
            values = {metric["name"]["tag"]: metric["value"] for metric in session["metricValues"]}
            seen[job] = (group["hparams"], values, session["status"])
        assert {(h["optimizer.lr"], h["seed"]) for h, _, _ in seen.values()} == {
            (lr, seed) for lr in (0.001, 0.01) for seed in ("0", "1")
        }
        assert seen[3][0]["trainer.max_steps"] == "6" and seen[0][0]["trainer.max_steps"] == "4"
        assert all(status == "STATUS_SUCCESS" for _, _, status in seen.values())
        for job, (_, values, _) in seen.items():
            best = json.loads((job_dir(sweep, job) / "result.json").read_text())["best"]
            assert values["val/loss_best"] == pytest.approx(best, rel=1e-6)

        tags = server.get("/data/plugin/scalars/tags")
        for run, run_tags in tags.items():
            assert all(tag.startswith(("train/", "val/", "vitals/")) for tag in run_tags), run
    finally:
        server.stop()


def sweep_of_two(train_here, tmp_path: Path) -> Path:
    """Two jobs of a sweep, trained here into a sweep directory as Hydra lays one out (its
    ``multirun.yaml`` marks it a sweep): they differ in optimizer.lr and seed."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    for job, (lr, seed) in enumerate([("0.001", "0"), ("0.01", "1")]):
        train_here(*TINY, "trainer.val_every_n_steps=2", f"optimizer.lr={lr}", f"seed={seed}",
                   run_dir=sweep / str(job))  # fmt: skip
    return sweep


def test_a_sweeps_hparams_columns_are_what_its_jobs_differ_in_and_its_val_metrics(train_here, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    train_here(*TINY, "optimizer.lr=0.001", run_dir=sweep / "0")
    assert not (sweep / EXPERIMENT_FILE).exists()  # one job differs from nothing: TensorBoard's columns
    train_here(
        *TINY,
        "optimizer.lr=0.01",
        "seed=3",
        "checkpoint.save_best=false",
        "metrics=none",
        run_dir=sweep / "1",
    )
    experiment = sweep_experiment(sweep)
    infos = {info.name: info for info in experiment.hparam_infos}
    assert list(infos) == [
        "checkpoint.save_best",
        "metrics.acc._target_",
        "optimizer.lr",
        "seed",
    ]  # no constants
    assert all(info.differs for info in infos.values())
    lr = infos["optimizer.lr"].domain_interval
    assert (lr.min_value, lr.max_value) == (0.001, 0.01)
    assert list(infos["seed"].domain_discrete) == ["0", "3"]
    assert list(infos["checkpoint.save_best"].domain_discrete) == [False, True]
    assert [info.name.tag for info in experiment.metric_infos] == ["val/loss_best", "val/loss", "val/acc"]
    assert (sweep / EXPERIMENT_FILE).exists()  # written when the second job started
    # A run outside a sweep writes none.
    run_dir = train_here(*TINY)
    assert not (run_dir.parent / EXPERIMENT_FILE).exists()


def test_the_monitored_metric_and_its_best_come_first(train_here, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    for job, lr in enumerate(["0.001", "0.01"]):
        train_here(*TINY, "checkpoint.monitor=val/acc", "checkpoint.mode=max", f"optimizer.lr={lr}",
                   run_dir=sweep / str(job))  # fmt: skip
    tags = [info.name.tag for info in sweep_experiment(sweep).metric_infos]
    assert tags == ["val/acc_best", "val/acc", "val/loss"]


@pytest.mark.slow
def test_tensorboard_opens_a_sweeps_hparams_tab_on_its_objective(train_here, tmp_path):
    """What TensorBoard's HParams tab is served: its table ticks the first five metric columns and the
    first five settings, differing ones first. Here those are the val metrics, the monitor's best first,
    and only the settings the jobs differ in, whose integers are text (printed as integers)."""
    sweep = sweep_of_two(train_here, tmp_path)
    server = TensorBoard(sweep)
    try:
        experiment = server.experiment(runs=2)
        assert [info["name"] for info in experiment["hparamInfos"]] == ["optimizer.lr", "seed"]
        assert [info["name"]["tag"] for info in experiment["metricInfos"]][:5] == [
            "val/loss_best", "val/loss", "val/acc"]  # fmt: skip
        groups = server.session_groups(["optimizer.lr", "seed"])
        rows = {
            Path(group["sessions"][0]["name"]).name: {
                key: group["hparams"][key] for key in ("optimizer.lr", "seed")
            }
            for group in groups
        }
        assert rows == {"0": {"optimizer.lr": 0.001, "seed": "0"}, "1": {"optimizer.lr": 0.01, "seed": "1"}}
        for group in groups:
            values = {m["name"]["tag"]: m["value"] for m in group["sessions"][0]["metricValues"]}
            job = Path(group["sessions"][0]["name"]).name
            assert values["val/loss_best"] == pytest.approx(
                min(v for _, v in read_scalars(sweep / job)["val/loss"])
            )
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs a headless chromium")
def test_a_screenshot_of_the_hparams_tab(train_here, tmp_path):
    """The screenshot script draws the tab as a browser shows it (docs/tensorboard_hparams.png)."""
    sweep = sweep_of_two(train_here, tmp_path)
    picture = tmp_path / "hparams.png"
    script = Path(__file__).resolve().parents[1] / "scripts" / "tensorboard_screenshot.py"
    done = subprocess.run([sys.executable, str(script), str(sweep), str(picture), "--size", "1000x500"],
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    header = picture.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1000, 500)


def test_a_damaged_job_record_is_left_out_of_the_sweeps_columns(train_here, tmp_path):
    sweep = sweep_of_two(train_here, tmp_path)
    (sweep / "2").mkdir()
    (sweep / "2" / HPARAMS_FILE).write_bytes(b"\x05" + bytes(40))  # a record length, then no record
    (sweep / "3").mkdir()
    (sweep / "3" / HPARAMS_FILE).write_bytes(b"\x10" + bytes(11) + b"not an event" + bytes(8))
    assert [info.name for info in sweep_experiment(sweep).hparam_infos] == ["optimizer.lr", "seed"]


def runs_of_two_sweeps_and_another_model(train_here, tmp_path: Path) -> Path:
    """Under ``outputs/`` of the folder runner runs in, as Hydra lays them out: a sweep over
    optimizer.lr, a sweep over seed, and a single run of a wider model with dropout."""
    outputs = tmp_path / "outputs"
    for name, swept in [("a", ["optimizer.lr=0.001", "optimizer.lr=0.01"]), ("b", ["seed=0", "seed=1"])]:
        sweep = outputs / "multirun" / "2026-12-06" / name
        sweep.mkdir(parents=True)
        (sweep / "multirun.yaml").write_text("hydra: {}\n")
        for job, setting in enumerate(swept):
            train_here(*TINY, setting, run_dir=sweep / str(job))
    train_here(*TINY, "model.hidden=[32]", "model.dropout=0.1", run_dir=outputs / "2026-12-06" / "single")
    return outputs


def test_outputs_records_every_runs_settings_the_differing_ones_marked(train_here, tmp_path, monkeypatch):
    """Two sweeps and a run of another model under outputs/: its record lists every setting, the model,
    the swept keys of both sweeps marked differing (and listed first), the constants after them."""
    monkeypatch.chdir(tmp_path)
    outputs = runs_of_two_sweeps_and_another_model(train_here, tmp_path)
    experiment = read_experiment(outputs / EXPERIMENT_FILE)
    infos = {info.name: info for info in experiment.hparam_infos}
    differing = [name for name, info in infos.items() if info.differs]
    assert differing == ["model.dropout", "model.hidden", "optimizer.lr", "seed"]
    assert list(infos)[:4] == differing
    assert set(infos) == set(hparams_of(as_dict(composed(*TINY)), seed=0))  # the whole config
    assert list(infos["model.hidden"].domain_discrete) == ["[32]", "[64]"]
    assert list(infos["seed"].domain_discrete) == ["0", "1"]
    assert [info.name.tag for info in experiment.metric_infos] == ["val/loss_best", "val/loss", "val/acc"]
    # The only record under outputs/: with several, TensorBoard would take one at random.
    assert [path.parent for path in outputs.rglob(EXPERIMENT_FILE)] == [outputs]


def read_experiment(path: Path) -> api_pb2.Experiment:
    from tensorboard.compat.proto.event_pb2 import Event

    from runner.observe.events import read_records

    for record in read_records(path.read_bytes()):
        for value in Event.FromString(record).summary.value:
            if value.tag == "_hparams_/experiment":
                return plugin_data_pb2.HParamsPluginData.FromString(
                    value.metadata.plugin_data.content
                ).experiment
    raise AssertionError(f"no experiment record in {path}")


@pytest.mark.slow
def test_tensorboard_on_outputs_shows_every_runs_differing_settings_side_by_side(
    train_here, tmp_path, monkeypatch
):
    """``tensorboard --logdir outputs`` with two sweeps and a run of another model: the HParams tab's
    columns are outputs/'s (the model and both sweeps' keys, differing first), not one sweep's, and
    every run is a row with its values."""
    monkeypatch.chdir(tmp_path)
    outputs = runs_of_two_sweeps_and_another_model(train_here, tmp_path)
    server = TensorBoard(outputs)
    try:
        experiment = server.experiment(runs=5)
        names = [info["name"] for info in experiment["hparamInfos"]]
        assert names[:4] == ["model.dropout", "model.hidden", "optimizer.lr", "seed"]
        assert "data.batch_size" in names and "optimizer._target_" in names  # the constants too
        groups = server.session_groups(["model.hidden", "optimizer.lr", "seed"])
        rows = sorted(
            (group["hparams"]["model.hidden"], group["hparams"]["optimizer.lr"], group["hparams"]["seed"])
            for group in groups
        )
        assert rows == [
            ("[32]", 0.001, "0"), ("[64]", 0.001, "0"), ("[64]", 0.001, "0"), ("[64]", 0.001, "1"),
            ("[64]", 0.01, "0"),
        ]  # fmt: skip
    finally:
        server.stop()
