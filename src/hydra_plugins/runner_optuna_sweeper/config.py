"""The sweeper's settings as Hydra sees them: ``hydra/sweeper=optuna``. Its samplers
(``hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|qmc|gp``) and pruners
(``hydra/sweeper/pruner=median|percentile|successive_halving|hyperband``) are configs in runner's
``conf/hydra/sweeper/``: each names an Optuna class by ``_target_``, and its keys are that class's
arguments, whose types the search checks as it starts (``runner.search.options``). ``cmaes`` is
refused in one line when a search starts: Optuna's CmaEsSampler loads its state back from the study's
storage as a pickle, which a study file could use to run code (``runner.search.study``).

Hydra imports this module whenever it looks for plugins (every runner command), so it imports
nothing heavy and registers one config: Optuna is loaded only when a search runs, and a sampler's
or pruner's config is read only when a search picks it."""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

SWEEPER_TARGET = "hydra_plugins.runner_optuna_sweeper.optuna_sweeper.OptunaSweeper"


@dataclass
class OptunaSweeperConfig:
    _target_: str = SWEEPER_TARGET
    _recursive_: bool = False  # the search builds the sampler itself (its seed, a grid's search space)
    defaults: list[Any] = field(default_factory=lambda: ["_self_", {"sampler": "tpe"}, {"pruner": None}])
    sampler: Any = MISSING
    # null: every trial runs to its end. Any Optuna pruner, by _target_ (or hydra/sweeper/pruner=median).
    pruner: Any = None
    # minimize or maximize; a list of them for a multi-objective search (then objectives names the metrics).
    direction: Any = "minimize"
    # The metric each direction applies to, at each trial's best validation. null: checkpoint.monitor.
    objectives: list[str] | None = None
    # Where the study lives: journal (<sweep dir>/optuna.journal, for several sweeper processes), any
    # Optuna RDB URL (postgresql+psycopg://...), or null: sqlite:///<sweep dir>/optuna.db (one process).
    storage: str | None = None
    study_name: str | None = None  # null: "runner"
    n_trials: int = 20  # the jobs of this sweep (the same command continues them)
    n_jobs: int = 1  # trials run at once, each slot refilled as its trial ends (joblib, submitit launchers)
    # The share of finished trials that may fail before the search stops.
    max_failure_rate: float = 0.0
    params: dict[str, str] | None = None  # key: Hydra sweep syntax (interval, tag(log, ...), choice, range)


def register() -> None:
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConfig, provider="runner")


register()
