"""A named part of a model: the parameters whose ``named_parameters()`` names match glob patterns
(``generator.*``, matched with fnmatch). A pattern that matches nothing is refused in one line that
names the closest parameter names."""

import difflib
import fnmatch
from collections.abc import Sequence

import torch

from runner.config.errors import ConfigError


def as_patterns(value: object, key: str) -> list[str]:
    """One pattern or a list of them."""
    patterns = [value] if isinstance(value, str) else list(value) if isinstance(value, Sequence) else None
    if not patterns or not all(isinstance(pattern, str) and pattern for pattern in patterns):
        raise ConfigError(
            f"{key}={value!r} is not allowed; {key} must be a glob pattern over the model's parameter "
            "names (generator.*) or a list of them"
        )
    return patterns


def closest_names(pattern: str, names: Sequence[str], count: int = 3) -> str:
    close = difflib.get_close_matches(pattern, names, n=count, cutoff=0.0)
    return ", ".join(close) if close else "none (the model has no parameters)"


def matching(
    model: torch.nn.Module, patterns: Sequence[str], key: str
) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters, in the model's order, whose names match any of ``patterns``; each pattern
    must match at least one."""
    named = list(model.named_parameters())
    names = [name for name, _ in named]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise ConfigError(
                f"{key}: the pattern {pattern!r} matches no parameter of {type(model).__name__}; the "
                f"closest names are {closest_names(pattern, names)}"
            )
    return [(name, p) for name, p in named if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)]
