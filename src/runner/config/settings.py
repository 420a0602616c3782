"""What a setting is: its allowed values, whether a resumed run may change it, whether it is a
hyperparameter. Declared once, beside each field of the schema (``setting(...)``); the checks, the
resume comparison and the HParams list are derived from those declarations."""

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from omegaconf import MISSING

# "same": a resumed run must keep it (it changes the math of the steps taken: the model's settings
# too, dropout as much as a layer's width); "may_change": it does not (limits, cadences, where things go).
ResumePolicy = Literal["same", "may_change"]


@dataclass(frozen=True)
class Rule:
    allowed: str  # what the error message says is allowed
    accepts: Callable[[Any], bool]


@dataclass(frozen=True)
class Setting:
    rule: Rule | None = None
    resume: ResumePolicy = "same"


def setting(
    default: Any = MISSING,
    *,
    rule: Rule | None = None,
    resume: ResumePolicy = "same",
    keys: Mapping[str, Setting] | None = None,
) -> Any:
    """A dataclass field carrying its :class:`Setting`. ``keys`` declares settings inside an open
    ``_target_`` mapping (``optimizer.lr``); a dataclass type as default makes a nested section."""
    metadata = {"setting": Setting(rule, resume), "keys": dict(keys or {})}
    if isinstance(default, type) and dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=default, metadata=metadata)
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared_settings(schema: type, prefix: str = "") -> dict[str, Setting]:
    """Every declared setting of a schema by dotted key, in declaration order."""
    found: dict[str, Setting] = {}
    for field in dataclasses.fields(schema):
        key = prefix + field.name
        if isinstance(field.type, type) and dataclasses.is_dataclass(field.type):
            found.update(declared_settings(field.type, key + "."))
            continue
        found[key] = field.metadata.get("setting", Setting())
        for inner, declared in field.metadata.get("keys", {}).items():
            found[f"{key}.{inner}"] = declared
    return found


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def int_at_least(minimum: int, nullable: bool = False, null_means: str = "") -> Rule:
    allowed = f"an integer >= {minimum}" + (f", or null ({null_means})" if nullable else "")
    return Rule(allowed, lambda v: (nullable and v is None) or (is_int(v) and v >= minimum))


def number_above(minimum: float, inclusive: bool, nullable: bool = False, null_means: str = "") -> Rule:
    relation = ">=" if inclusive else ">"
    allowed = f"a finite number {relation} {minimum:g}" + (f", or null ({null_means})" if nullable else "")

    def accepts(value: Any) -> bool:
        if nullable and value is None:
            return True
        if not _is_number(value) or not math.isfinite(value):
            return False
        return value >= minimum if inclusive else value > minimum

    return Rule(allowed, accepts)


def one_of(*choices: str) -> Rule:
    return Rule("one of " + ", ".join(choices), lambda v: v in choices)


BOOLEAN = Rule("true or false", lambda v: isinstance(v, bool))


# The settings that choose parameters by name: ``freeze`` and ``optimizer.param_groups`` (what they match
# is checked against the model, in ``experiment/param_groups.py``).
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
