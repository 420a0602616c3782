"""The trackers' registry (config/trackers.py): a new tracker is its module plus one entry, and what
``logger=[...]`` takes, what must be installed and what a run opens all follow from that entry."""

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
import tomllib
from conftest import TINY, composed, read_scalars

from runner.config.errors import ConfigError
from runner.config.trackers import TRACKERS, TrackerEntry
from runner.observe.trackers import TRACKERS_FILE, Trackers, TrackerStart, tracker_class

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


class ProbeTracker:
    """A tracker of the kind a user adds: it keeps every call it gets."""

    name = "probe"
    calls: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, start: TrackerStart) -> None:
        self.record = {"run_id": "probe-1"}
        self.calls.append(("start", (start.resumed_at, start.run_dir.name, "optimizer.lr" in start.hparams)))

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        self.calls.append(("log_scalars", (step, dict(scalars))))

    def log_text(self, tag: str, text: str) -> None:
        self.calls.append(("log_text", tag))

    def finish(self, status: str, result: Mapping[str, Any]) -> None:
        self.calls.append(("finish", (status, result["step"])))

    def close(self) -> None:
        self.calls.append(("close", None))


@pytest.fixture
def probe_entry(monkeypatch):
    ProbeTracker.calls.clear()
    monkeypatch.setitem(TRACKERS, "probe", TrackerEntry(f"{__name__}:ProbeTracker"))


def test_a_new_tracker_is_one_entry_and_gets_what_the_event_file_gets(probe_entry, train_here):
    run_dir = train_here(*TINY, "logger=[tensorboard,probe]")
    calls = ProbeTracker.calls
    assert calls[0] == ("start", (None, "run", True)) and calls[-2:] == [
        ("finish", ("ok", 4)),
        ("close", None),
    ]
    assert ("log_text", "run/plan") in calls
    logged: dict[str, list[tuple[int, float]]] = {}
    for method, args in calls:
        if method == "log_scalars":
            for tag, value in args[1].items():
                logged.setdefault(tag, []).append((args[0], value))
    expected = read_scalars(run_dir)
    assert "train/loss" in expected
    assert {tag: [(step, pytest.approx(value, rel=1e-6)) for step, value in series] for tag, series in
            logged.items()} == expected  # fmt: skip
    assert json.loads((run_dir / TRACKERS_FILE).read_text()) == {"probe": {"run_id": "probe-1"}}


def test_a_new_trackers_package_is_checked_before_the_run(monkeypatch):
    monkeypatch.setitem(TRACKERS, "probe", TrackerEntry(f"{__name__}:ProbeTracker", package="no_such_lib_x"))
    with pytest.raises(ConfigError) as refused:
        composed("logger=[tensorboard,probe]")
    assert "probe is not installed" in str(refused.value)
    assert 'pip install "runner[probe]" (or pip install no_such_lib_x)' in str(refused.value)


def test_a_name_without_an_entry_is_refused_naming_every_entry():
    with pytest.raises(ConfigError) as refused:
        composed("logger=[tensorboard,probe]")
    assert ", ".join(TRACKERS) in str(refused.value)


def test_no_trackers_asked_for_is_a_set_that_does_nothing():
    before = set(threading.enumerate())
    trackers = Trackers()
    started = time.monotonic()
    trackers.log_scalars(1, {"train/loss": 0.5})
    trackers.finish("ok", {})
    trackers.flush()
    assert set(threading.enumerate()) <= before  # no thread started to feed nobody
    trackers.close()
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("name", [name for name, entry in TRACKERS.items() if entry.opens])
def test_each_entry_opens_a_tracker_of_its_name_whose_extra_installs_its_package(name):
    assert tracker_class(name).name == name  # trackers.json and the warnings name it as logger=[...] does
    package = TRACKERS[name].package
    if package is not None:  # the refusal says: pip install "runner[NAME]"
        extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
        assert any(requirement.startswith(package) for requirement in extras[name])
