"""What an Optuna search searches, read from Hydra's sweep syntax: ``hydra.sweeper.params`` and the
command line's sweep overrides as Optuna distributions (``runner.search.space``), and the fixed
settings every job gets; each checked against the config before a trial is asked for."""

from collections.abc import Sequence

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from omegaconf import DictConfig, OmegaConf

from runner.config.errors import ConfigError
from runner.search.space import SearchSpace


def distribution_of(override: Override) -> optuna.distributions.BaseDistribution | None:
    """The Optuna distribution of a param in Hydra's sweep syntax; None for a fixed value.
    ``interval(a, b)``: floats in [a, b] (``tag(log, ...)`` on a log scale); ``range(a, b, s)``: the
    values Hydra's range gives (b excluded), stepped; ``choice(...)``: those values."""
    if not override.is_sweep_override():
        return None
    key = override.get_key_element()
    if override.is_interval_sweep():
        interval = override.value()
        low, high = float(interval.start), float(interval.end)
        log_scale = "log" in interval.tags
        if low >= high or (log_scale and low <= 0):
            raise ConfigError(
                f"hydra.sweeper.params.{key}: interval({low:g}, {high:g}) is empty"
                + (" or not positive (a log scale needs 0 < low < high)" if log_scale else "")
            )
        return optuna.distributions.FloatDistribution(low, high, log=log_scale)
    values = list(override.sweep_iterator(transformer=Transformer.encode))
    if not values:
        raise ConfigError(f"hydra.sweeper.params.{key}: {override.input_line} gives no values")
    if override.is_range_sweep() and not override.value().shuffle and len(values) > 1:
        step = override.value().step
        if all(isinstance(value, int) for value in values):
            return optuna.distributions.IntDistribution(values[0], values[-1], step=int(step))
        return optuna.distributions.FloatDistribution(values[0], values[-1], step=float(step))
    return optuna.distributions.CategoricalDistribution(values)


def search_space(params: dict[str, str] | None, arguments: Sequence[str]) -> SearchSpace:
    """``hydra.sweeper.params`` and the command line's overrides: each in Hydra's sweep syntax is
    searched, the others are given to every job as they are (a key fixed on the command line is not
    searched)."""
    lines = [f"{key}={value}" for key, value in (params or {}).items()] + list(arguments)
    parsed = OverridesParser.create().parse_overrides(lines)
    distributions, fixed = {}, []
    for override in parsed:
        distribution = distribution_of(override)
        if distribution is None:
            fixed.append(override.input_line)
        else:
            distributions[override.get_key_element()] = distribution
    for override in parsed:  # a fixed value (the command line's) takes the key out of the search
        if not override.is_sweep_override():
            distributions.pop(override.get_key_element(), None)
    if not distributions:
        raise ConfigError("hydra.sweeper.params: nothing to search; give each searched key a range, e.g. "
                          "optimizer.lr: tag(log, interval(1e-4, 1e-1))")  # fmt: skip
    return SearchSpace(distributions, fixed)


def check_keys(space: SearchSpace, config: DictConfig) -> None:
    """Each searched key is a setting of the composed config (or a config group), and each value it may
    take is allowed: a typo fails here, before a trial is asked for."""
    from runner.cli.hydra.hydra_app import group_names, options_of
    from runner.config.checks import check_value

    missing = object()
    for key, distribution in space.distributions.items():
        given = f"hydra.sweeper.params.{key}"
        if key in group_names():
            choices = getattr(distribution, "choices", ())
            unknown = [c for c in choices if not isinstance(c, str) or c not in options_of(key)]
            if unknown:
                raise ConfigError(f"{given}: {unknown[0]} is not an option of {key}; {key} is one of "
                                  f"{', '.join(options_of(key))}")  # fmt: skip
            continue
        if OmegaConf.select(config, key, default=missing) is missing:
            raise ConfigError(f"{given}: the config has no key {key}")
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            values = [value for value in distribution.choices if not isinstance(value, str)]
        else:
            values = [distribution.low, distribution.high]
        for value in values:
            try:
                check_value(key, value)
            except ConfigError as error:
                raise ConfigError(f"{given}: {error}") from None
