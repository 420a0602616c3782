"""The types of each sampler's and pruner's settings, by the Optuna class they build. Their options
and values are configs in runner's ``conf/hydra/sweeper/sampler`` and ``conf/hydra/sweeper/pruner``,
which Hydra reads only when a search picks one; these types are checked as the search starts
(``runner.search.settings.typed``). As typed configs in Hydra's ConfigStore they would be built on every
command, since Hydra imports each plugin's configs whenever it starts: that was 0.8% of the start-up
of every run."""

from dataclasses import dataclass
from typing import Any


@dataclass
class TPESampler:
    _target_: str
    seed: int | None
    n_startup_trials: int
    n_ei_candidates: int
    multivariate: bool | None
    group: bool
    constant_liar: bool
    warn_independent_sampling: bool | None
    consider_prior: bool | None
    prior_weight: float | None
    consider_magic_clip: bool | None
    consider_endpoints: bool | None


@dataclass
class RandomSampler:
    _target_: str
    seed: int | None


@dataclass
class GridSampler:
    _target_: str
    _partial_: bool
    seed: int | None


@dataclass
class CmaEsSampler:
    _target_: str
    seed: int | None
    x0: dict[str, Any] | None
    sigma0: float | None
    n_startup_trials: int
    consider_pruned_trials: bool
    restart_strategy: str | None
    use_separable_cma: bool
    with_margin: bool
    lr_adapt: bool


@dataclass
class NSGAIISampler:
    _target_: str
    seed: int | None
    population_size: int
    mutation_prob: float | None
    crossover_prob: float
    swapping_prob: float


@dataclass
class QMCSampler:
    _target_: str
    seed: int | None
    qmc_type: str
    scramble: bool


@dataclass
class GPSampler:
    _target_: str
    seed: int | None
    n_startup_trials: int
    deterministic_objective: bool


@dataclass
class MedianPruner:
    _target_: str
    n_startup_trials: int
    n_warmup_steps: int
    interval_steps: int
    n_min_trials: int


@dataclass
class PercentilePruner(MedianPruner):
    percentile: float


@dataclass
class SuccessiveHalvingPruner:
    _target_: str
    min_resource: Any  # an int, or "auto"
    reduction_factor: int
    min_early_stopping_rate: int
    bootstrap_count: int


@dataclass
class HyperbandPruner:
    _target_: str
    min_resource: int
    max_resource: Any  # an int, or "auto"
    reduction_factor: int
    bootstrap_count: int


SAMPLERS = (TPESampler, RandomSampler, GridSampler, CmaEsSampler, NSGAIISampler, QMCSampler, GPSampler)
PRUNERS = (MedianPruner, PercentilePruner, SuccessiveHalvingPruner, HyperbandPruner)
# A _target_ -> the types of its arguments.
TYPES = {
    **{f"optuna.samplers.{kind.__name__}": kind for kind in SAMPLERS},
    **{f"optuna.pruners.{kind.__name__}": kind for kind in PRUNERS},
}
