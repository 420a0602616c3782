"""What an Optuna search searches: each searched key's Optuna distribution, and the fixed settings
every job gets. Read from Hydra's sweep syntax by ``runner.cli.hydra.optuna_space``."""

from dataclasses import dataclass
from typing import Any

import optuna

from runner.config.errors import ConfigError


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
