"""The HParams tab of a sweep kept outside ``outputs/`` opens on its objective: the sweep directory holds
an "experiment" record that names the columns, rewritten whenever one of its jobs starts or ends.

Without one, TensorBoard lists every setting of the runs (sorted by name, differing ones first) and
every scalar as a metric (sorted by name: ``train/`` before ``val/``), and its HParams
tab ticks the first five of each: constants and training curves, not the objective. The record names the
settings that differ between the sweep's jobs (all ticked, their values' range as TensorBoard would
compute it) and the validation metrics, ``val/<monitor>_best`` first, then the monitored metric, then
the others. The jobs' own records keep their whole config.

TensorBoard takes one experiment record per logdir (one at random where there are several), so a sweep
under ``outputs/`` writes none: ``outputs/`` holds the one record of every run under it
(``all_runs_hparams``). A sweep elsewhere (``hydra.sweep.dir=...``) holds its own.
"""

import logging
from collections.abc import Iterable
from pathlib import Path

from google.protobuf.message import DecodeError
from google.protobuf.struct_pb2 import Value
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from runner.checkpoint.durable import WriteError, atomic_write, writing
from runner.config.bounded_read import UnreadableFile, read_bounded
from runner.observe.events import read_records, tf_record
from runner.observe.hparams import HPARAMS_FILE, START_TAG, records
from runner.observe.records import best_tag

log = logging.getLogger("runner")
EXPERIMENT_FILE = "events.out.tfevents.0000000000.experiment"
HPARAMS_LIMIT = 16 << 20  # a run's record is its flattened config and its end: a few KB
EXPERIMENT_TAG = "_hparams_/experiment"  # TensorBoard's name
SWEEP_MARK = "multirun.yaml"  # Hydra writes it into a sweep's directory before the first job starts
RUNS_FOLDER = "outputs"  # where runner puts runs: hydra.run.dir's and hydra.sweep.dir's default


def runs_folder_of(run_dir: Path) -> Path | None:
    """``outputs/`` of the folder runner was started in, if ``run_dir`` is under it."""
    folder = (Path.cwd() / RUNS_FOLDER).resolve()
    run = run_dir.resolve()
    return folder if run != folder and run.is_relative_to(folder) else None


def session_hparams(run_dir: Path) -> dict[str, Value]:
    """A run's settings as its HParams record holds them; empty where it has none (yet), or a damaged
    one (TensorBoard skips it too), or one that is no plain file of a record's size (a FIFO there would
    hang the end of every run under the same ``outputs/``)."""
    try:
        for record in read_records(read_bounded(run_dir / HPARAMS_FILE, HPARAMS_LIMIT)):
            for value in Event.FromString(record).summary.value:
                if value.tag == START_TAG:
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    return dict(data.session_start_info.hparams)
    except (OSError, DecodeError, UnreadableFile):
        pass
    return {}


def _kind(value: Value) -> str:
    return value.WhichOneof("kind") or ""


def differing_hparam(name: str, values: list[Value], missing: bool) -> api_pb2.HParamInfo | None:
    """The column of a setting whose values differ between the jobs (or that some jobs lack), typed
    and bounded as TensorBoard types and bounds it; ``None`` for a constant."""
    info = hparam_column(name, values, missing)
    return info if info.differs else None


def hparam_column(name: str, values: list[Value], missing: bool) -> api_pb2.HParamInfo:
    """A setting's column, typed and bounded as TensorBoard types and bounds it, marked ``differs``
    where its values differ between the runs (or some runs lack it)."""
    kinds = {_kind(value) for value in values}
    shown = {value.SerializeToString(deterministic=True) for value in values}
    info = api_pb2.HParamInfo(name=name, differs=len(shown) > 1 or missing)
    if kinds == {"number_value"}:
        numbers = [value.number_value for value in values]
        info.type = api_pb2.DATA_TYPE_FLOAT64
        info.domain_interval.min_value, info.domain_interval.max_value = min(numbers), max(numbers)
    elif kinds == {"bool_value"}:
        info.type = api_pb2.DATA_TYPE_BOOL
        info.domain_discrete.extend(sorted({value.bool_value for value in values}))
    else:
        texts = {getattr(value, _kind(value)) for value in values}
        info.type = api_pb2.DATA_TYPE_STRING
        info.domain_discrete.extend(sorted(str(text) for text in texts))
    return info


def metric_tags(sessions: Iterable[dict[str, Value]]) -> list[str]:
    """``val/<monitor>_best``, the monitored metric, then ``val/loss`` and each configured metric."""
    monitors, names = [], set()
    for hparams in sessions:
        monitor = hparams.get("checkpoint.monitor")
        if monitor is not None and monitor.string_value not in monitors:
            monitors.append(monitor.string_value)
        names |= {key.split(".")[1] for key in hparams if key.startswith("metrics.") and key.count(".") >= 2}
    tags = [tag for monitor in monitors for tag in (best_tag(monitor), monitor)]
    return list(dict.fromkeys([*tags, "val/loss", *(f"val/{name}" for name in sorted(names))]))


def sweep_experiment(sweep_dir: Path) -> api_pb2.Experiment | None:
    """The columns of a sweep's HParams tab, from its jobs' records; ``None`` until two jobs differ."""
    jobs = [path for path in sorted(sweep_dir.iterdir()) if (path / HPARAMS_FILE).is_file()]
    sessions = [hparams for hparams in map(session_hparams, jobs) if hparams]
    names = sorted({name for hparams in sessions for name in hparams})
    infos = []
    for name in names:
        values = [hparams[name] for hparams in sessions if name in hparams]
        info = differing_hparam(name, values, missing=len(values) < len(sessions))
        if info is not None:
            infos.append(info)
    if not infos:
        return None
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metric_tags(sessions)]
    return api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)


def refresh_sweep_experiment(run_dir: Path) -> None:
    """Rewrite the experiment record of the sweep ``run_dir`` is a job of (nothing for a run outside a
    sweep). A refused write is a warning: the tab falls back to TensorBoard's own columns."""
    sweep_dir = run_dir.resolve().parent
    if not (sweep_dir / SWEEP_MARK).is_file() or runs_folder_of(sweep_dir) is not None:
        return
    path = sweep_dir / EXPERIMENT_FILE
    try:
        write_experiment(path, sweep_experiment(sweep_dir))
    except (WriteError, OSError) as error:
        log.warning("could not write the sweep's columns for TensorBoard's HParams tab: %s", error)


def write_experiment(path: Path, experiment: api_pb2.Experiment | None) -> None:
    """The HParams tab's column record at ``path``, written whole or not at all; ``None`` removes it
    (no run holds a setting to show)."""
    if experiment is None:
        with writing(path):
            path.unlink(missing_ok=True)
        return
    data = plugin_data_pb2.HParamsPluginData(experiment=experiment)
    version = tf_record(Event(file_version="brain.Event:2").SerializeToString())
    content = version + records((EXPERIMENT_TAG, data), wall_time=0.0)
    with writing(path):
        atomic_write(path, lambda handle: handle.write(content))
