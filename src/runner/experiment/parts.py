"""A named part of a model: the parameters whose ``named_parameters()`` names match glob patterns
(``generator.*``), with the matcher ``freeze`` and ``optimizer.param_groups`` use (param_groups.py), so
a pattern that matches nothing is refused alike, naming the closest parameter names."""

from collections.abc import Sequence

import torch

from runner.config.errors import ConfigError
from runner.experiment.param_groups import matching as name_matcher


def as_patterns(value: object, key: str) -> list[str]:
    """One pattern or a list of them."""
    patterns = [value] if isinstance(value, str) else list(value) if isinstance(value, Sequence) else None
    if not patterns or not all(isinstance(pattern, str) and pattern for pattern in patterns):
        raise ConfigError(
            f"{key}={value!r} is not allowed; {key} must be a glob pattern over the model's parameter "
            "names (generator.*) or a list of them"
        )
    return patterns


def matching(
    model: torch.nn.Module, patterns: Sequence[str], key: str
) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters, in the model's order, whose names match any of ``patterns``; each pattern
    must match at least one."""
    named = list(model.named_parameters())
    chosen = name_matcher(key, patterns, [name for name, _ in named])
    return [(name, parameter) for name, parameter in named if chosen(name)]
