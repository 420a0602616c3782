"""What an Optuna search searches: each searched key's Optuna distribution, and the fixed settings
every job gets. The command line's adapter reads Hydra's sweep syntax (``runner.cli.hydra.optuna_space``)
and hands each param here as plain values: an interval, a stepped range or a choice."""

from dataclasses import dataclass
from typing import Any

import optuna

from runner.config.errors import ConfigError

Distribution = (
    optuna.distributions.FloatDistribution
    | optuna.distributions.IntDistribution
    | optuna.distributions.CategoricalDistribution
)


def interval(key: str, low: float, high: float, log_scale: bool) -> Distribution:
    """Floats in [low, high], on a log scale if asked; ``key``, the setting that gave it, names an empty
    one in its refusal."""
    if low >= high or (log_scale and low <= 0):
        raise ConfigError(
            f"{key}: interval({low:g}, {high:g}) is empty"
            + (" or not positive (a log scale needs 0 < low < high)" if log_scale else "")
        )
    return optuna.distributions.FloatDistribution(low, high, log=log_scale)


def stepped(values: list[Any], step: float) -> Distribution:
    """A range's values, first to last by ``step``: integers where every value is one."""
    if all(isinstance(value, int) for value in values):
        return optuna.distributions.IntDistribution(values[0], values[-1], step=int(step))
    return optuna.distributions.FloatDistribution(values[0], values[-1], step=float(step))


def choice(values: list[Any]) -> Distribution:
    return optuna.distributions.CategoricalDistribution(values)


def checked_values(distribution: Distribution) -> list[Any]:
    """The values of ``distribution`` that a setting's own check is given before a trial is asked for:
    a choice's (its strings aside: those are config options, checked as such), a range's ends."""
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return [value for value in distribution.choices if not isinstance(value, str)]
    return [distribution.low, distribution.high]


@dataclass
class SearchSpace:
    distributions: dict[str, optuna.distributions.BaseDistribution]
    fixed: list[str]  # overrides every job gets (``key=value``), the command line's among them

    def overrides(self, params: dict[str, Any]) -> list[str]:
        return [*(f"{key}={value}" for key, value in params.items()), *self.fixed]

    def holds(self, params: dict[str, Any]) -> bool:
        """Whether ``params`` (a stored trial's, read from the study's database) are settings of this
        search: its keys, each value one its distribution allows. Nothing else from a database becomes
        a job's override (a stored key could name code, ``model._target_``)."""
        if set(params) != set(self.distributions):
            return False
        for key, value in params.items():
            distribution = self.distributions[key]
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                if value not in distribution.choices:
                    return False
            elif not isinstance(value, (int, float)) or not within(value, distribution):
                return False
        return True

    def grid(self) -> dict[str, list[Any]]:
        """The search space as a grid (for ``GridSampler``): every param a choice or a range."""
        grid = {}
        for key, distribution in self.distributions.items():
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                grid[key] = list(distribution.choices)
            elif isinstance(distribution, optuna.distributions.IntDistribution):
                grid[key] = list(range(distribution.low, distribution.high + 1, distribution.step))
            elif isinstance(distribution, optuna.distributions.FloatDistribution) and distribution.step:
                count = round((distribution.high - distribution.low) / distribution.step) + 1
                grid[key] = [distribution.low + index * distribution.step for index in range(count)]
            else:
                raise ConfigError(
                    f"hydra.sweeper.params.{key}: the grid sampler takes choice(...) or range(...), "
                    "not an interval"
                )
        return grid


def within(
    value: float, distribution: optuna.distributions.FloatDistribution | optuna.distributions.IntDistribution
) -> bool:
    """In a numeric distribution's range, give or take the rounding of a float grid's points
    (``low + index * step`` may land just above ``high``)."""
    low, high = distribution.low, distribution.high
    slack = 1e-9 * max(1.0, high - low)
    return low - slack <= value <= high + slack
