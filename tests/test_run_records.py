"""What a run records ends one way, however the run ends (``experiment/run_records.py``): its trackers are
told how it ended and closed, and its HParams record ends as succeeded or failed, or stays open for the
resume of a run a signal stopped."""

import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import TINY
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from runner.config.trackers import TRACKERS, TrackerEntry

STOPPED_AT_2 = "+callbacks.stop._target_=signals_itself.SignalsAtStep"  # SIGTERM to itself at step 2


class EndsTracker:
    """A tracker that keeps how the run ended it."""

    name = "ends"
    calls: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, start: Any) -> None:
        self.record: dict[str, Any] = {}

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        pass

    def log_text(self, tag: str, text: str) -> None:
        pass

    def finish(self, status: str, result: Mapping[str, Any]) -> None:
        self.calls.append(("finish", status))

    def close(self) -> None:
        self.calls.append(("close", None))


@pytest.fixture
def ends_entry(monkeypatch):
    EndsTracker.calls.clear()
    monkeypatch.setitem(TRACKERS, "ends", TrackerEntry(f"{__name__}:EndsTracker"))


def hparams_end(run_dir: Path) -> int | None:
    """The status of the run's HParams record's end, as TensorBoard reads it; None: it has no end."""
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    contents = accumulator.PluginTagToContent("hparams")
    if "_hparams_/session_end_info" not in contents:
        return None
    return plugin_data_pb2.HParamsPluginData.FromString(
        contents["_hparams_/session_end_info"]
    ).session_end_info.status


@pytest.mark.parametrize(
    ("ending", "status", "hparams_status"),
    [
        ("ok", "ok", api_pb2.STATUS_SUCCESS),
        ("stopped", "stopped", None),
        ("failed", "failed", api_pb2.STATUS_FAILURE),
    ],
)
def test_every_ending_tells_the_trackers_and_the_hparams_record_how_the_run_ended(
    ends_entry, train_here, tmp_path, ending, status, hparams_status
):
    """The failure is a user's callback raising mid-run, after every record is open: it goes up through
    the loop's own close to the run's one ending. (A run folder whose names are taken is refused before
    any record opens: ``test_run_folders.py``.)"""
    run_dir = tmp_path / "run"
    run = (*TINY, "logger=[tensorboard,ends]", "trainer.max_steps=4")
    if ending == "ok":
        train_here(*run)
    elif ending == "stopped":
        with pytest.raises(SystemExit) as stopped:
            train_here(*run, STOPPED_AT_2)
        assert stopped.value.code == 128 + signal.SIGTERM
    else:
        with pytest.raises(RuntimeError, match="a bug in the user's callback at step 2"):
            train_here(*run, "+callbacks.fails._target_=failing_callback.FailsAtStep")
    assert EndsTracker.calls == [("finish", status), ("close", None)]
    assert hparams_end(run_dir) == hparams_status
