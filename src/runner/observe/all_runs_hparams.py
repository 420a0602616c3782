"""``tensorboard --logdir outputs``: every run's settings side by side in the HParams tab, the ones
that differ between the runs first, whichever sweeps and single runs ``outputs/`` holds.

TensorBoard takes the columns of the whole tab from one "experiment" record under its logdir, and with
several its default loader (``--load_fast``) picks one at random each time it starts. So ``outputs/``
(where runner puts runs, under the folder it is started in) holds the only one: rewritten when a run
under it starts or ends, it lists every setting any run has, marks those whose values differ between
the runs or that some runs lack (another model's keys), which TensorBoard lists first and ticks, and
names the validation metrics, the monitored metric's best first. A sweep's directory under
``outputs/`` holds none (``sweep_hparams`` writes one only for a sweep elsewhere); one left by an
earlier version is removed. Opened on such a sweep's directory alone, TensorBoard builds the columns
itself: its jobs' settings, the swept ones first.
"""

import logging
import os
from pathlib import Path

from google.protobuf.struct_pb2 import Value
from tensorboard.plugins.hparams import api_pb2

from runner.checkpoint.durable import WriteError, writing
from runner.observe.hparams import HPARAMS_FILE
from runner.observe.sweep_hparams import (
    EXPERIMENT_FILE,
    hparam_column,
    metric_tags,
    runs_folder_of,
    session_hparams,
    write_experiment,
)

log = logging.getLogger("runner")
SKIPPED = {"checkpoints", "wandb", "mlartifacts", ".hydra", "profile"}  # in a run: never another run


def runs_under(folder: Path) -> tuple[list[Path], list[Path]]:
    """The run directories under ``folder`` that hold an HParams record, and the experiment records
    of its subfolders (a run's own folders, such as its checkpoints, are not looked into)."""
    runs, records = [], []
    for parent, folders, files in os.walk(folder):
        if HPARAMS_FILE in files:
            runs.append(Path(parent))
        if EXPERIMENT_FILE in files and Path(parent) != folder:
            records.append(Path(parent) / EXPERIMENT_FILE)
        folders[:] = sorted(name for name in folders if name not in SKIPPED)
    return runs, records


def all_runs_experiment(sessions: list[dict[str, Value]]) -> api_pb2.Experiment | None:
    """Every setting of the runs, the differing ones marked; ``None`` until two runs differ."""
    names = sorted({name for hparams in sessions for name in hparams})
    infos = []
    for name in names:
        values = [hparams[name] for hparams in sessions if name in hparams]
        infos.append(hparam_column(name, values, missing=len(values) < len(sessions)))
    if not any(info.differs for info in infos):
        return None
    infos.sort(key=lambda info: (not info.differs, info.name))
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metric_tags(sessions)]
    return api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)


def refresh_all_runs_experiment(run_dir: Path) -> None:
    """Rewrite the record of ``outputs/`` that ``run_dir`` is under (nothing for a run elsewhere). A
    refused write is a warning: the tab falls back to TensorBoard's own columns."""
    folder = runs_folder_of(run_dir)
    if folder is None:
        return
    path = folder / EXPERIMENT_FILE
    try:
        runs, others = runs_under(folder)
        for other in others:  # TensorBoard would pick one of the records under outputs/ at random
            with writing(other):
                other.unlink(missing_ok=True)
        sessions = [hparams for hparams in map(session_hparams, runs) if hparams]
        write_experiment(path, all_runs_experiment(sessions))
    except (WriteError, OSError) as error:
        log.warning("could not write the columns of %s for TensorBoard's HParams tab: %s", folder, error)
