"""The rules of the settings that choose parameters by name: ``freeze`` and
``optimizer.param_groups`` (what they match is checked against the model, in
``experiment/param_groups.py``)."""

from typing import Any

from runner.config.settings import Rule


def is_patterns(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(item, str) and item for item in value)


def is_group(value: Any) -> bool:
    if not isinstance(value, dict) or "params" not in value:
        return False
    params = value["params"]
    named = "name" not in value or isinstance(value["name"], str)
    return named and ((isinstance(params, str) and params != "") or (is_patterns(params) and bool(params)))


PATTERNS = Rule(
    "a list of glob patterns over parameter names, such as [backbone.0.*, backbone.1.*]", is_patterns
)
PARAM_GROUPS = Rule(
    "a list of groups, each {params: a pattern or a list of patterns, name: ..., and any optimizer "
    "argument: lr, weight_decay, ...}, or null",
    lambda v: v is None or (isinstance(v, list | tuple) and all(is_group(group) for group in v)),
)
