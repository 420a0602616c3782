"""What a run records, owned in one place: opened in order once everything is built and checked, and
ended once, the same way whether the run succeeded, stopped to be resumed, or failed.

Only rank 0 records. It opens, in this order: the trackers of ``logger=[...]`` (one that cannot start
refuses the run before anything is written, a resume's ``train.log`` included), the plan in
``train.log`` (every process prints it), ``run.yaml``, ``data_split.json``, the HParams record and the
HParams columns of the sweep and of ``outputs/``, and the TensorBoard event file (a resumed run's purges
the interrupted run's events past the checkpoint's step).
"""

import logging
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import runner
from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.config.schema import RunConfig
from runner.experiment.assembly import Assembly
from runner.experiment.lock import refuse_if_held
from runner.experiment.write_places import check_run_places
from runner.observe.all_runs_hparams import refresh_all_runs_experiment
from runner.observe.console import to_log_file
from runner.observe.hparams import HParamsRecord, hparams_of
from runner.observe.mlflow_store import check_tracking_uri
from runner.observe.records import record_split, write_run_record
from runner.observe.sweep_hparams import refresh_sweep_experiment
from runner.observe.trackers import Loggers, Trackers, open_trackers
from runner.observe.writer import MetricLogger, NullLogger, TensorBoardLogger
from runner.training.distributed import ProcessInfo

log = logging.getLogger("runner")


def check_record_places(config: RunConfig, run_dir: Path, process: ProcessInfo) -> None:
    """Before anything is built: a run still writing in ``run_dir`` is named, an entry of the wrong kind
    where the run writes (a file named ``checkpoints``) refuses the run, and so does an MLflow store that
    cannot be used."""
    if process.is_main:
        refuse_if_held(run_dir)
    check_run_places(run_dir, f"hydra.run.dir={run_dir}")
    if "mlflow" in config.logger and config.mlflow.tracking_uri is not None:
        check_tracking_uri(config.mlflow.tracking_uri)


@dataclass
class RunRecords:
    """The records of the run ``assembly`` built: none until :meth:`open`, ended by :meth:`end`."""

    assembly: Assembly
    trackers: Trackers = field(default_factory=Trackers)  # none, until rank 0 opens logger=[...]
    events: MetricLogger = field(default_factory=NullLogger)  # rank 0's event file, once opened
    hparams: HParamsRecord | None = None  # rank 0's, once it starts writing

    @property
    def resumed_at(self) -> int | None:
        return self.assembly.state.step if self.assembly.start.found else None

    def open(self, plan: str) -> MetricLogger:
        """The records opened in order (the module's docstring); the logger the loop logs to: the event
        file and the trackers on rank 0, nothing on the others."""
        assembly, run_dir = self.assembly, self.assembly.run_dir
        if assembly.process.is_main:
            hparams = hparams_of(assembly.plain_config, assembly.start.seed)
            opened = open_trackers(assembly.config.logger, run_dir, hparams, assembly.config, self.resumed_at)
            self.trackers = Trackers(opened)
        log.info(plan)
        if not assembly.process.is_main:
            return NullLogger()
        write_run_record(run_dir, assembly.plain_config, runtime_of(assembly))
        parts = assembly.prepared.parts
        record_split(run_dir, parts.train_set, parts.val_set, parts.test_set)
        self.hparams = HParamsRecord(run_dir, hparams)
        self.hparams.start()  # a resume's replaces the interrupted run's
        # A sweep job: the sweep's HParams columns, with its settings; again at its end, after jobs that
        # started at the same time (parallel launchers) have written their records.
        refresh_hparams_columns(run_dir)
        # Events past the checkpoint's step belong to the lost future of the interrupted run.
        purge_step = None if self.resumed_at is None else self.resumed_at + 1
        self.events = TensorBoardLogger(run_dir, purge_step=purge_step)
        return Loggers(self.events, self.trackers)

    def end(self, state: TrainState | None, error: BaseException | None = None) -> None:
        """The run's one ending, however it ends (``error``: it failed). The trackers are told how: ``ok``,
        ``stopped`` (to be resumed) with the monitored metric's best, or ``failed`` (then closed at once,
        with the event file). Unless it stopped, the HParams record ends as succeeded or failed and the
        HParams columns are refreshed; a refusal's one line is kept in ``train.log`` too."""
        if error is not None:
            with suppress(Exception):  # the event file's error is the one raised (by the caller) already
                self.trackers.close()  # the trackers' runs end as failed, if not ended yet
                self.events.close()
        else:
            self.trackers.finish("ok" if state.stopped_by_signal is None else "stopped", {
                "monitor": self.assembly.config.checkpoint.monitor, "best": state.best_val,
                "best_step": state.best_val_step, "step": state.step,
            })  # fmt: skip
        if self.hparams is None or (error is None and state.stopped_by_signal is not None):
            return  # nothing written yet, or stopped: to be resumed
        self.hparams.end(ok=error is None)
        refresh_hparams_columns(self.assembly.run_dir)
        if isinstance(error, UserError):  # the console gets it in one line; train.log keeps it too
            to_log_file(logging.ERROR, f"runner: error: {error}")


def runtime_of(assembly: Assembly) -> dict[str, Any]:
    """What the run resolved beside its config, for ``run.yaml``."""
    config, precision, world_size = assembly.config, assembly.prepared.precision, assembly.process.world_size
    return {
        "device": str(assembly.device),
        "precision_requested": precision.requested,
        "precision_used": precision.used,
        "seed": assembly.start.seed,
        "world_size": world_size,
        "effective_batch_size": config.data.batch_size * config.accumulate * world_size,
        "planned_steps": assembly.total_steps,
        "runner_version": runner.__version__,
        "torch_version": str(torch.__version__),
    }


def refresh_hparams_columns(run_dir: Path) -> None:
    """The HParams columns of the sweep the run is a job of, and of every run under ``outputs/``."""
    refresh_sweep_experiment(run_dir)
    refresh_all_runs_experiment(run_dir)
