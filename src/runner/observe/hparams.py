"""A run's hyperparameters for TensorBoard's HParams tab: its whole config, flattened, in an event file
of its own.

No run writes an "experiment" record: with one, TensorBoard takes the columns of every run under a
logdir from the one run that wrote it. Without one it builds the columns from all runs' records, and
marks the keys whose values differ between them: the HParams tab shows those first (a sweep's swept
keys, what differs between the runs under one logdir) and hides the constants. Its metrics are the
runs' own scalars (``val/loss``, ``val/loss_best``, ...): no one-point charts of their own.

TensorBoard keeps the first record of a tag it reads in a run, reading a run's event files in the order
of their names. The file's name sorts before every event file runner writes, so its record is the one
kept; a resume rewrites it, so the record is the resumed run's config.
"""

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf.struct_pb2 import Value
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from runner.checkpoint.durable import atomic_write, writing
from runner.config.errors import show
from runner.config.typed import flatten
from runner.observe.events import tf_record

HPARAMS_FILE = "events.out.tfevents.0000000000.hparams"
START_TAG, END_TAG = "_hparams_/session_start_info", "_hparams_/session_end_info"  # TensorBoard's names
# A pointer to a checkpoint, not a setting to compare runs by: it would mark every resumed run apart.
NOT_HPARAMS = {"resume"}


def hparams_of(config: Mapping[str, Any]) -> dict[str, float | str | bool]:
    """Every setting, flattened (``optimizer.lr``): numbers and booleans as they are, other values as
    the user would type them on the command line."""
    hparams: dict[str, float | str | bool] = {}
    for key, value in flatten(config).items():
        if key in NOT_HPARAMS:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        hparams[key] = value if number or isinstance(value, bool | str) else show(value)
    return hparams


def _value(setting: float | str | bool) -> Value:
    if isinstance(setting, bool):
        return Value(bool_value=setting)
    if isinstance(setting, int | float):
        return Value(number_value=float(setting))
    return Value(string_value=setting)


def _summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary:
    data.version = 0
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name="hparams", content=data.SerializeToString())
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])


def write_hparams(run_dir: Path, hparams: Mapping[str, float | str | bool], started: float,
                  finished: bool = False) -> None:  # fmt: skip
    """The run's record (and, once it ``finished``, its end), written atomically over an older one."""
    start = plugin_data_pb2.SessionStartInfo(start_time_secs=started)
    for name, setting in hparams.items():
        start.hparams[name].CopyFrom(_value(setting))
    summaries = [_summary(START_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start))]
    if finished:
        end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=time.time())
        summaries.append(_summary(END_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)))
    events = [Event(wall_time=started, file_version="brain.Event:2")]
    events += [Event(wall_time=started, step=0, summary=summary) for summary in summaries]
    records = b"".join(tf_record(event.SerializeToString()) for event in events)
    path = run_dir / HPARAMS_FILE
    with writing(path):
        atomic_write(path, lambda handle: handle.write(records))
