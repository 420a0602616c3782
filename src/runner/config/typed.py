"""The composed config as typed objects, made once: the rest of runner reads attributes."""

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from runner.config.checks import check_top_level_key, validate_config
from runner.config.errors import ConfigError, show
from runner.config.schema import RunConfig


def typed_config(composed: DictConfig | Mapping[str, Any]) -> RunConfig:
    """The schema's dataclasses with every interpolation resolved; the open ``_target_`` groups
    become plain dicts. A config composed without the schema (another primary config) or read back
    from a checkpoint is merged onto it, so an unknown key is named. Checked before it is returned."""
    # Unresolved, so a missing value ("???") is named below rather than raised here.
    given = OmegaConf.to_container(composed) if isinstance(composed, DictConfig) else dict(composed)
    for key, value in given.items():
        check_top_level_key(str(key), given=f"{key}={show(value)}")
    try:
        if not (isinstance(composed, DictConfig) and OmegaConf.get_type(composed) is RunConfig):
            composed = OmegaConf.merge(OmegaConf.structured(RunConfig), composed)
        config = OmegaConf.to_object(keep_planned_values(composed))
    except MissingMandatoryValue as error:
        raise ConfigError(
            f"{error.full_key} has no value; set it in the config or on the command line"
        ) from None
    except ConfigKeyError as error:
        raise ConfigError(
            f"{error.full_key or error.key} is not a config key ({error.msg.splitlines()[0]})"
        ) from None
    except OmegaConfBaseException as error:
        raise ConfigError(f"{error.full_key or '?'}: {str(error).splitlines()[0]}") from None
    dropped = sorted(flatten(given).keys() - flatten(as_dict(config)).keys())
    if dropped:  # a key added inside a typed section (+trainer.foo=1): the schema has no place for it
        raise ConfigError(
            f"{dropped[0]} is not a config key; python -m runner train --cfg job lists the keys"
        )
    validate_config(config)
    return config


# Known only once the data is built: a scheduler's ${total_steps} and ${steps_per_epoch} stay as written
# here and are filled in when the scheduler is built (training/schedules.py).
PLANNED_VALUES = ("total_steps", "steps_per_epoch")


def keep_planned_values(composed: DictConfig) -> DictConfig:
    """A copy whose scheduler values naming a planned value are escaped, so resolving keeps them."""
    scheduler = composed.get("scheduler")
    if not isinstance(scheduler, DictConfig):
        return composed
    raw = flatten(OmegaConf.to_container(scheduler, resolve=False))
    planned = {
        key: value
        for key, value in raw.items()
        if isinstance(value, str) and any("${" + name + "}" in value for name in PLANNED_VALUES)
    }
    if not planned:
        return composed
    composed = copy.deepcopy(composed)
    for key, value in planned.items():
        OmegaConf.update(composed, f"scheduler.{key}", value.replace("${", "\\${"), merge=False)
    return composed


def as_dict(config: RunConfig) -> dict[str, Any]:
    """Plain values only (safe to save in a checkpoint and to write as YAML)."""
    return dataclasses.asdict(config)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
