"""A run's hyperparameters for TensorBoard's HParams tab: its whole config, flattened, in an event file
of its own.

No run writes an "experiment" record: with one, TensorBoard takes the columns of every run under a
logdir from the one run that wrote it. Without one it builds the columns from all runs' records, and
marks the keys whose values differ between them: the HParams tab lists those first (a sweep's swept
keys, what differs between the runs under one logdir), the constants after them. Its metrics are the
runs' own scalars (``val/loss``, ``val/loss_best``, ...): no one-point charts of their own. A sweep's
directory holds one experiment record for its jobs (``sweep_hparams``): its tab opens on the objective.

TensorBoard keeps the first record of a tag it reads in a run, reading a run's event files in the order
of their names. The file's name sorts before every event file runner writes, so its record is the one
kept; a resume rewrites it, so the record is the resumed run's config. The run's end (success or
failure) is appended to the same file, where a TensorBoard that is running reads it too.
"""

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.struct_pb2 import Value
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from runner.checkpoint.durable import WriteError, atomic_write, writing
from runner.config.errors import show
from runner.config.typed import flatten
from runner.observe.events import tf_record

log = logging.getLogger("runner")
HPARAMS_FILE = "events.out.tfevents.0000000000.hparams"
START_TAG, END_TAG = "_hparams_/session_start_info", "_hparams_/session_end_info"  # TensorBoard's names
# A pointer to a checkpoint, not a setting to compare runs by: it would mark every resumed run apart.
NOT_HPARAMS = {"resume"}


def hparams_of(config: Mapping[str, Any], seed: int | None = None) -> dict[str, float | str | bool]:
    """Every setting, flattened (``optimizer.lr``): floats and booleans as they are, other values as
    the user would type them. ``seed``: the one the run uses (drawn when ``seed=null``). A setting that is
    null, or a number that is not finite, is left out: TensorBoard shows an empty cell, where a text
    value would turn the whole column into text and its filter would hide the runs with a number.

    Integers (``seed``, ``data.batch_size``, ``trainer.max_steps``) are text: TensorBoard prints every
    number with five significant digits (``4.0000``, ``1.2346e+5``). A setting typed ``int`` is an
    integer in every run, so its column is text in every run, filtered by its values."""
    hparams: dict[str, float | str | bool] = {}
    for key, value in flatten({**config, **({"seed": seed} if seed is not None else {})}).items():
        if key in NOT_HPARAMS or value is None:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool) and not math.isfinite(value):
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            hparams[key] = str(value)
        else:
            hparams[key] = value if isinstance(value, float | bool | str) else show(value)
    return hparams


def _value(setting: float | str | bool) -> Value:
    if isinstance(setting, bool):
        return Value(bool_value=setting)
    if isinstance(setting, int | float):
        return Value(number_value=float(setting))
    return Value(string_value=setting)


def records(*summaries: tuple[str, plugin_data_pb2.HParamsPluginData], wall_time: float) -> bytes:
    events = []
    for tag, data in summaries:
        data.version = 0
        metadata = SummaryMetadata(
            plugin_data=SummaryMetadata.PluginData(plugin_name="hparams", content=data.SerializeToString())
        )
        events.append(
            Event(
                wall_time=wall_time,
                step=0,
                summary=Summary(value=[Summary.Value(tag=tag, metadata=metadata)]),
            )
        )
    return b"".join(tf_record(event.SerializeToString()) for event in events)


@dataclass
class HParamsRecord:
    """One run's record in the HParams tab: its start, written when the run starts writing (a resume's
    over the interrupted run's), and its end, appended once the run succeeded or failed. A run stopped
    by a signal has no end: it is to be resumed."""

    run_dir: Path
    hparams: dict[str, float | str | bool]
    started: float = field(default_factory=time.time)
    ended: bool = False

    @property
    def path(self) -> Path:
        return self.run_dir / HPARAMS_FILE

    def start(self) -> None:
        """A refused write is a ``WriteError``: nothing has been trained yet."""
        start = plugin_data_pb2.SessionStartInfo(start_time_secs=self.started)
        for name, setting in self.hparams.items():
            start.hparams[name].CopyFrom(_value(setting))
        version = tf_record(Event(wall_time=self.started, file_version="brain.Event:2").SerializeToString())
        content = version + records(
            (START_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start)), wall_time=self.started
        )
        with writing(self.path):
            atomic_write(self.path, lambda handle: handle.write(content))

    def end(self, ok: bool) -> None:
        """Appended, so a running TensorBoard reads it. The run's outcome is already decided: a refused
        write is only a warning (as for ``result.json``)."""
        if self.ended:
            return
        self.ended = True
        status = api_pb2.STATUS_SUCCESS if ok else api_pb2.STATUS_FAILURE
        end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
        content = records(
            (END_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)), wall_time=time.time()
        )
        try:
            with writing(self.path), open(self.path, "ab") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
        except (WriteError, OSError) as error:
            log.warning("could not record the run's end for TensorBoard's HParams tab: %s", error)
