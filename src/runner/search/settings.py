"""The Optuna sweeper's own settings, checked before anything is written: its directions and
objectives, its counts, and the sampler and pruner it builds."""

import math
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runner.config.errors import ConfigError
from runner.search.options import TYPES


def directions_of(direction: Any) -> list[str]:
    directions = list(direction) if isinstance(direction, (list, tuple, ListConfig)) else [direction]
    for value in directions:
        if value not in ("minimize", "maximize"):
            raise ConfigError(f"hydra.sweeper.direction={value}: a direction is minimize or maximize "
                              "(a list of them for several objectives)")  # fmt: skip
    return [str(value) for value in directions]


def objectives_of(objectives: Sequence[str] | None, directions: list[str], config: DictConfig) -> list[str]:
    """The metric each direction applies to: ``checkpoint.monitor`` for a single objective, unless
    named; a multi-objective search names them all. The monitored metric's direction must agree with
    ``checkpoint.mode`` (the best validation, best.pt and the pruner all go by it)."""
    monitor, mode = str(config.checkpoint.monitor), str(config.checkpoint.mode)
    names = [str(name) for name in objectives] if objectives else []
    if not names:
        if len(directions) > 1:
            raise ConfigError(
                f"hydra.sweeper.direction lists {len(directions)} directions; name the metric each applies "
                f"to with hydra.sweeper.objectives, e.g. [{monitor}, val/acc]"
            )
        names = [monitor]
    if len(names) != len(directions):
        raise ConfigError(f"hydra.sweeper.objectives names {len(names)} metrics for {len(directions)} "
                          "direction(s); give one direction per objective")  # fmt: skip
    wanted = {"min": "minimize", "max": "maximize"}.get(mode)
    for name, direction in zip(names, directions, strict=True):
        if name == monitor and direction != wanted:
            raise ConfigError(
                f"hydra.sweeper.direction={direction} for {monitor}, but checkpoint.mode={mode}; the search "
                f"would keep the worst runs: use direction {wanted}, or checkpoint.mode to match"
            )
    if monitor not in names:
        raise ConfigError(
            f"hydra.sweeper.objectives={names} leaves out checkpoint.monitor={monitor}, which each job's "
            "best validation is chosen by; list it among the objectives"
        )
    return names


def objective_values(result: dict[str, Any], objectives: list[str]) -> list[float] | None:
    values = result.get("objectives") if isinstance(result.get("objectives"), dict) else {}
    if not values and len(objectives) == 1:
        values = {objectives[0]: result.get("best")}
    picked = [values.get(name) for name in objectives]
    if any(not isinstance(value, (int, float)) or not math.isfinite(value) for value in picked):
        return None
    return [float(value) for value in picked]


def check_counts(n_trials: int, n_jobs: int, max_failure_rate: float) -> None:
    counts = {"n_trials": n_trials, "n_jobs": n_jobs}
    for key, value in counts.items():
        if value < 1:
            raise ConfigError(f"hydra.sweeper.{key}={value} is not allowed; it must be an integer >= 1")
    if not 0.0 <= max_failure_rate <= 1.0:
        raise ConfigError(f"hydra.sweeper.max_failure_rate={max_failure_rate} is not allowed; it must be a "
                          "number from 0 to 1")  # fmt: skip


def typed(key: str, config: Any) -> DictConfig | None:
    """A sampler's or pruner's settings with the types of its class's arguments (``runner.search.options``):
    a value of the wrong type, or a key the class does not take, is named in one line before the search
    starts. An argument not given keeps Optuna's default; another class, named by ``_target_``, checks
    its own arguments as it is built."""
    if config is None:
        return None
    if not isinstance(config, DictConfig):  # hydra.sweeper.pruner=median: a dot where a slash was meant
        group = key.rsplit(".", 1)[-1]
        raise ConfigError(f"{key}={config}: pick an option with hydra/sweeper/{group}={config}, or give "
                          f"{key} as a mapping with _target_")  # fmt: skip
    kind = TYPES.get(str(config.get("_target_")))
    if kind is None:
        return config
    try:
        checked = OmegaConf.merge(OmegaConf.structured(kind), config)
    except OmegaConfBaseException as error:
        raise ConfigError(f"{key}.{error.full_key}: {str(error).splitlines()[0]}") from None
    return OmegaConf.create({name: checked[name] for name in config})


def is_grid(sampler_config: Any) -> bool:
    return str(sampler_config.get("_target_", "")).endswith("GridSampler")
