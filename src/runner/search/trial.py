"""A job of an Optuna search: its objective values (the metrics of its best validation) and, with a
pruner, its reports to its trial after every validation, which may end it early (pruned).

The job finds its trial in the study's storage by its sweep directory and job number (the sweeper
recorded them on the trial), so this works with any launcher that shares the storage."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from runner.config.errors import ConfigError
from runner.search.storage import in_sweep_dir, open_storage, storage_url, study_name_of
from runner.search.study import JOB_ATTR, SWEEP_ATTR, quiet_optuna
from runner.training.callbacks import Context
from runner.training.validation import improves


@dataclass
class TrialLink:
    """The job's trial in its study, to report to and ask whether to prune."""

    trial: optuna.trial.Trial
    pruner: str  # its class name, for the messages

    def should_stop(self, value: float, step: int) -> bool:
        """Report ``value`` at ``step``; whether the pruner stops the trial."""
        self.trial.report(value, step)
        return bool(self.trial.should_prune())


def link_to_trial(sweeper: Mapping[str, Any], pruner: Any, sweep_dir: Path, job: int) -> TrialLink | None:
    """The running trial the sweeper made for job ``job`` of ``sweep_dir`` (``sweeper``: its settings),
    judged by ``pruner``; None when the job has no running trial."""
    quiet_optuna()
    storage = open_storage(storage_url(sweeper.get("storage"), sweep_dir))
    name = study_name_of(sweeper.get("study_name"))
    study = optuna.load_study(
        study_name=name, storage=storage, pruner=pruner, sampler=optuna.samplers.RandomSampler()
    )
    # A study in the sweep directory (no storage named) is this sweep's alone, wherever it was moved.
    attrs = (
        {JOB_ATTR: job}
        if in_sweep_dir(sweeper.get("storage"))
        else {SWEEP_ATTR: str(sweep_dir.resolve()), JOB_ATTR: job}
    )
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    own = [trial for trial in running if all(trial.user_attrs.get(k) == v for k, v in attrs.items())]
    if not own:
        return None
    trial_id = storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name(name), own[-1].number
    )
    return TrialLink(optuna.trial.Trial(study, trial_id), type(study.pruner).__name__)


class SearchTrial:
    """A callback the search adds to each of its jobs: keeps the metrics of the job's best validation
    (by ``monitor``), the values it returns to the study, and stops the job when its trial is pruned.
    Its state goes into checkpoints, so a continued job keeps what it had found."""

    def __init__(
        self, monitor: str, mode: str, link: TrialLink | None = None, samples_per_step: int | None = None,
        objectives: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.monitor, self.mode, self.link, self.names = monitor, mode, link, objectives
        self.samples_per_step = samples_per_step  # None: the job validates at the end of each epoch
        self.best: float | None = None
        self.best_metrics: dict[str, float] = {}
        self.pruned_at: int | None = None

    def on_validation_end(self, context: Context) -> None:
        value = context.metrics.get(self.monitor)
        if value is None:
            return  # the engine names a monitored metric the validation does not give
        missing = [name for name in self.names if name not in context.metrics]
        if missing:
            logged = ", ".join(name for name in context.metrics if name.startswith("val/"))
            raise ConfigError(f"hydra.sweeper.objectives names {missing[0]}, but this run's validation gives "
                              f"only {logged}; name those")  # fmt: skip
        if improves(value, self.best, self.mode):
            self.best = value
            self.best_metrics = {k: float(v) for k, v in context.metrics.items() if k.startswith("val/")}
        if self.link is not None and self.link.should_stop(value, self.position(context)):
            self.pruned_at = context.step
            shown = f"{value:.4g}" if math.isfinite(value) else str(value)
            context.request_stop(f"pruned by the search's {self.link.pruner} ({self.monitor} {shown})")

    def position(self, context: Context) -> int:
        """Where the job reports to its trial: trials of other batch sizes are compared on the same
        data. At the end of an epoch, the epochs done; between epochs, the samples seen."""
        if self.samples_per_step is None:
            return context.epoch
        return context.step * self.samples_per_step

    def objectives(self, names: list[str]) -> dict[str, float | None]:
        """Each objective's value at the best validation (None where the run had none)."""
        return {name: self.best_metrics.get(name) for name in names}

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_metrics": dict(self.best_metrics)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.best_metrics = state.get("best"), dict(state.get("best_metrics", {}))
