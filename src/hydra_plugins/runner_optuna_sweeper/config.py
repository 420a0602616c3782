"""The sweeper's settings as Hydra sees them: ``hydra/sweeper=optuna``, its samplers
(``hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|qmc|gp``) and pruners
(``hydra/sweeper/pruner=median|percentile|successive_halving|hyperband``). Each sampler and pruner is
an Optuna class named by ``_target_``; its fields are that class's arguments. ``cmaes`` is refused in
one line when a search starts: Optuna's CmaEsSampler loads its state back from the study's storage as a
pickle, which a study file could use to run code (``runner.search.study``).

Hydra imports this module whenever it looks for plugins (every runner command), so it imports
nothing heavy: Optuna is loaded only when a search runs."""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

SWEEPER_TARGET = "hydra_plugins.runner_optuna_sweeper.optuna_sweeper.OptunaSweeper"


@dataclass
class TPESamplerConfig:
    _target_: str = "optuna.samplers.TPESampler"
    seed: int | None = None
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: bool | None = None
    group: bool = False
    constant_liar: bool = True  # parallel jobs (n_jobs > 1) are not all proposed the same point
    warn_independent_sampling: bool | None = None
    # Older Optuna's TPE settings; Optuna's defaults when left null.
    consider_prior: bool | None = None
    prior_weight: float | None = None
    consider_magic_clip: bool | None = None
    consider_endpoints: bool | None = None


@dataclass
class RandomSamplerConfig:
    _target_: str = "optuna.samplers.RandomSampler"
    seed: int | None = None


@dataclass
class GridSamplerConfig:
    """Every combination of the params once (each must be a choice or a range); the sweeper gives
    Optuna the search space."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True
    seed: int | None = None


@dataclass
class CmaEsSamplerConfig:
    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: int | None = None
    x0: dict[str, Any] | None = None
    sigma0: float | None = None
    n_startup_trials: int = 1
    consider_pruned_trials: bool = False
    restart_strategy: str | None = None
    use_separable_cma: bool = False
    with_margin: bool = False
    lr_adapt: bool = False


@dataclass
class NSGAIISamplerConfig:
    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: int | None = None
    population_size: int = 50
    mutation_prob: float | None = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass
class QMCSamplerConfig:
    _target_: str = "optuna.samplers.QMCSampler"
    seed: int | None = None
    qmc_type: str = "sobol"
    scramble: bool = False


@dataclass
class GPSamplerConfig:
    _target_: str = "optuna.samplers.GPSampler"
    seed: int | None = None
    n_startup_trials: int = 10
    deterministic_objective: bool = False


@dataclass
class MedianPrunerConfig:
    """Stops a trial whose value at a step is worse than the median of earlier trials at that step."""

    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: int = 5
    n_warmup_steps: int = 0
    interval_steps: int = 1
    n_min_trials: int = 1


@dataclass
class PercentilePrunerConfig(MedianPrunerConfig):
    """Stops a trial whose value at a step is in the worst ``percentile`` of earlier trials there."""

    _target_: str = "optuna.pruners.PercentilePruner"
    percentile: float = 25.0


@dataclass
class SuccessiveHalvingPrunerConfig:
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Any = "auto"
    reduction_factor: int = 4
    min_early_stopping_rate: int = 0
    bootstrap_count: int = 0


@dataclass
class HyperbandPrunerConfig:
    _target_: str = "optuna.pruners.HyperbandPruner"
    min_resource: int = 1
    max_resource: Any = "auto"
    reduction_factor: int = 3
    bootstrap_count: int = 0


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
    # Where the study lives (any Optuna storage URL). null: sqlite:///<sweep dir>/optuna.db.
    storage: str | None = None
    study_name: str | None = None  # null: "runner"
    n_trials: int = 20  # the jobs of this sweep (the same command continues them)
    n_jobs: int = 1  # trials proposed at once and launched together (parallel with the joblib launcher)
    # The share of finished trials that may fail before the search stops.
    max_failure_rate: float = 0.0
    params: dict[str, str] | None = None  # key: Hydra sweep syntax (interval, tag(log, ...), choice, range)


def register() -> None:
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConfig, provider="runner")
    samplers = {
        "tpe": TPESamplerConfig, "random": RandomSamplerConfig, "grid": GridSamplerConfig,
        "cmaes": CmaEsSamplerConfig, "nsgaii": NSGAIISamplerConfig, "qmc": QMCSamplerConfig,
        "gp": GPSamplerConfig,
    }  # fmt: skip
    for name, node in samplers.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="runner")
    pruners = {
        "median": MedianPrunerConfig, "percentile": PercentilePrunerConfig,
        "successive_halving": SuccessiveHalvingPrunerConfig, "hyperband": HyperbandPrunerConfig,
    }  # fmt: skip
    for name, node in pruners.items():
        store.store(group="hydra/sweeper/pruner", name=name, node=node, provider="runner")


register()
