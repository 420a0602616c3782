"""Config checks, applied at the edge: to command-line overrides before Hydra composes anything,
and to the composed config before anything is built or written.

Each check names the key, the value given and what is allowed, in one line.
"""

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from runner.schema import RunConfig

TOP_LEVEL_KEYS = frozenset(field.name for field in fields(RunConfig))


class UserError(ValueError):
    """A problem the user can fix; printed as one line, without a traceback."""


class ConfigError(UserError):
    """A setting that is not allowed or cannot work on this machine."""


@dataclass(frozen=True)
class Rule:
    allowed: str
    accepts: Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def int_at_least(minimum: int, nullable: bool = False, null_means: str = "") -> Rule:
    allowed = f"an integer >= {minimum}" + (f", or null ({null_means})" if nullable else "")
    return Rule(allowed, lambda v: (nullable and v is None) or (_is_int(v) and v >= minimum))


def number_above(minimum: float, inclusive: bool, nullable: bool = False, null_means: str = "") -> Rule:
    relation = ">=" if inclusive else ">"
    allowed = f"a number {relation} {minimum:g}" + (f", or null ({null_means})" if nullable else "")

    def accepts(value: Any) -> bool:
        if nullable and value is None:
            return True
        return _is_number(value) and (value >= minimum if inclusive else value > minimum)

    return Rule(allowed, accepts)


def one_of(*choices: str) -> Rule:
    return Rule("one of " + ", ".join(choices), lambda v: v in choices)


BOOLEAN = Rule("true or false", lambda v: isinstance(v, bool))
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
PRECISIONS = ("fp32", "amp", "bf16")

RULES: dict[str, Rule] = {
    "device": Rule(
        "auto, cpu, cuda, cuda:N or mps",
        lambda v: isinstance(v, str) and DEVICE_PATTERN.fullmatch(v) is not None,
    ),
    "seed": Rule(
        "an integer in [0, 2**32), or null (draw one and record it)",
        lambda v: v is None or (_is_int(v) and 0 <= v < 2**32),
    ),
    "deterministic": BOOLEAN,
    "precision": one_of(*PRECISIONS),
    "clip": number_above(0, inclusive=False, nullable=True, null_means="no clipping"),
    "accumulate": int_at_least(1),
    "on_nonfinite": one_of("raise", "skip", "off"),
    "max_nonfinite_in_a_row": int_at_least(1),
    "compile": BOOLEAN,
    "tf32": BOOLEAN,
    "channels_last": BOOLEAN,
    "trainer.max_steps": int_at_least(1, nullable=True, null_means="no step limit"),
    "trainer.max_epochs": int_at_least(1, nullable=True, null_means="no epoch limit"),
    "trainer.log_every_n_steps": int_at_least(1),
    "trainer.val_every_n_epochs": int_at_least(1, nullable=True, null_means="not per epoch"),
    "trainer.val_every_n_steps": int_at_least(1, nullable=True, null_means="not per step"),
    "data.batch_size": int_at_least(1),
    "data.num_workers": int_at_least(0),
    "data.shuffle": BOOLEAN,
    "optimizer.lr": number_above(0, inclusive=True),
    "optimizer.weight_decay": number_above(0, inclusive=True),
    "optimizer.momentum": number_above(0, inclusive=True),
    "scheduler.name": one_of("none", "cosine", "step"),
    "scheduler.warmup_steps": int_at_least(0),
    "scheduler.min_lr": number_above(0, inclusive=True),
    "scheduler.step_size": int_at_least(1),
    "scheduler.gamma": number_above(0, inclusive=False),
    "checkpoint.enabled": BOOLEAN,
    "checkpoint.every_n_steps": int_at_least(1, nullable=True, null_means="not per step"),
    "checkpoint.every_n_epochs": int_at_least(1, nullable=True, null_means="not per epoch"),
    "checkpoint.keep_last": int_at_least(1),
    "checkpoint.monitor": one_of("val/loss", "val/acc"),
    "checkpoint.mode": one_of("min", "max"),
    "checkpoint.save_best": BOOLEAN,
    "resume": Rule(
        "a checkpoint file, a run directory, latest, or auto",
        lambda v: v is None or (isinstance(v, str) and v != ""),
    ),
}


def show(value: Any) -> str:
    """A value as the user would type it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def check_value(key: str, value: Any) -> None:
    rule = RULES.get(key)
    if rule is not None and not rule.accepts(value):
        raise ConfigError(f"{key}={show(value)} is not allowed; {key} must be {rule.allowed}")


def check_top_level_key(key: str, given: str, extra_known: Iterable[str] = ()) -> None:
    """``given`` is what the user wrote (``foo=1``), to quote it back."""
    top = key.split(".")[0]
    known = TOP_LEVEL_KEYS | set(extra_known)
    if top not in known:
        raise ConfigError(
            f"{given}: '{top}' is not a config key; known top-level keys: " + ", ".join(sorted(known))
        )


def validate_config(config: Mapping[str, Any]) -> None:
    """Check the composed config (a plain, resolved dict) before anything is built."""
    for key, value in config.items():
        check_top_level_key(key, given=f"{key}={show(value)}")
    for key in RULES:
        section, _, leaf = key.rpartition(".")
        container = config.get(section) if section else config
        if isinstance(container, Mapping) and leaf in container:
            check_value(key, container[leaf])

    trainer = config["trainer"]
    if trainer["max_steps"] is None and trainer["max_epochs"] is None:
        raise ConfigError(
            "trainer.max_steps=null and trainer.max_epochs=null would never stop; "
            "set at least one of them to an integer >= 1"
        )
    checkpoint = config["checkpoint"]
    if checkpoint["monitor"] == "val/acc" and checkpoint["mode"] == "min":
        raise ConfigError(
            "checkpoint.mode=min with checkpoint.monitor=val/acc would keep the least accurate "
            "model; set checkpoint.mode=max"
        )
    for section in ("model", "optimizer", "loss"):
        if not isinstance(config.get(section), Mapping) or "_target_" not in config[section]:
            raise ConfigError(
                f"{section}._target_ is not set; {section} must be a config with a _target_ "
                f"(pick one with {section}=NAME or set {section}._target_=dotted.path)"
            )
    dataset = config["data"]["dataset"]
    if not isinstance(dataset, Mapping) or "_target_" not in dataset:
        raise ConfigError(
            "data.dataset._target_ is not set; data.dataset must have a _target_ returning "
            "(train_dataset, val_dataset)"
        )
