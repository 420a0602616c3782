"""Hydra's sweep syntax read for a search: ``hydra.sweeper.params`` and the command line's sweep
overrides, each param handed to ``runner.search.space`` as plain values (which Optuna distribution each
becomes is the search's), and the fixed settings every job gets; each checked against the config, by
Hydra's groups and OmegaConf's keys, before a trial is asked for. No Optuna here: the search is
``runner.search``'s."""

from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from omegaconf import DictConfig, OmegaConf

from runner.config.errors import ConfigError
from runner.search.space import Distribution, SearchSpace, checked_values, choice, interval, stepped


def distribution_of(override: Override) -> Distribution | None:
    """The distribution of a param in Hydra's sweep syntax; None for a fixed value.
    ``interval(a, b)``: floats in [a, b] (``tag(log, ...)`` on a log scale); ``range(a, b, s)``: the
    values Hydra's range gives (b excluded), stepped; ``choice(...)``: those values."""
    if not override.is_sweep_override():
        return None
    key = f"hydra.sweeper.params.{override.get_key_element()}"
    if override.is_interval_sweep():
        bounds = override.value()
        return interval(key, float(bounds.start), float(bounds.end), "log" in bounds.tags)
    values = list(override.sweep_iterator(transformer=Transformer.encode))
    if not values:
        raise ConfigError(f"{key}: {override.input_line} gives no values")
    if override.is_range_sweep() and not override.value().shuffle and len(values) > 1:
        return stepped(values, override.value().step)
    return choice(values)


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
        for value in checked_values(distribution):
            try:
                check_value(key, value)
            except ConfigError as error:
                raise ConfigError(f"{given}: {error}") from None
