"""Config checks, applied at the edge: to command-line overrides before Hydra composes anything,
and to the typed config before anything is built or written. The rules come from the schema.

Each check names the key, the value given and what is allowed, in one line.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from runner.config.errors import ConfigError, show
from runner.config.schema import SETTINGS, TOP_LEVEL_KEYS, RunConfig

ABSENT = object()


def check_value(key: str, value: Any) -> None:
    declared = SETTINGS.get(key)
    if declared is not None and declared.rule is not None and not declared.rule.accepts(value):
        raise ConfigError(f"{key}={show(value)} is not allowed; {key} must be {declared.rule.allowed}")


def check_top_level_key(key: str, given: str, extra_known: Iterable[str] = ()) -> None:
    """``given`` is what the user wrote (``foo=1``), to quote it back."""
    top = key.split(".")[0]
    known = TOP_LEVEL_KEYS | set(extra_known)
    if top not in known:
        raise ConfigError(
            f"{given}: '{top}' is not a config key; known top-level keys: " + ", ".join(sorted(known))
        )


def value_at(config: Any, key: str) -> Any:
    """``config``'s value at a dotted key (attributes of the typed sections, keys of the open
    mappings), or ``ABSENT``."""
    value = config
    for part in key.split("."):
        value = value.get(part, ABSENT) if isinstance(value, Mapping) else getattr(value, part, ABSENT)
        if value is ABSENT:
            return ABSENT
    return value


def has_target(value: Any) -> bool:
    return isinstance(value, Mapping) and "_target_" in value


def validate_config(config: RunConfig) -> None:
    """Check the typed config as a whole before anything is built."""
    for key in SETTINGS:
        value = value_at(config, key)
        if value is not ABSENT:
            check_value(key, value)

    if config.trainer.max_steps is None and config.trainer.max_epochs is None:
        raise ConfigError(
            "trainer.max_steps=null and trainer.max_epochs=null would never stop; "
            "set at least one of them to an integer >= 1"
        )
    if config.checkpoint.monitor == "val/acc" and config.checkpoint.mode == "min":
        raise ConfigError(
            "checkpoint.mode=min with checkpoint.monitor=val/acc would keep the least accurate "
            "model; set checkpoint.mode=max"
        )
    for section in ("model", "optimizer", "loss"):
        if not has_target(getattr(config, section)):
            raise ConfigError(
                f"{section}._target_ is not set; {section} must be a config with a _target_ "
                f"(pick one with {section}=NAME or set {section}._target_=dotted.path)"
            )
    if not has_target(config.data.dataset):
        raise ConfigError(
            "data.dataset._target_ is not set; data.dataset must have a _target_ returning "
            "(train_dataset, val_dataset)"
        )
