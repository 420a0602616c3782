"""Config checks, applied at the edge: to command-line overrides before Hydra composes anything,
and to the typed config before anything is built or written. The rules come from the schema.

Each check names the key, the value given and what is allowed, in one line.
"""

import dataclasses
import importlib.util
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from runner.config.closest import closest_name
from runner.config.errors import ConfigError, show
from runner.config.monitors import check_monitored
from runner.config.schema import SETTINGS, TOP_LEVEL_KEYS, RunConfig
from runner.config.trackers import TRACKERS

ABSENT = object()


# Integers must fit in 64 bits (torch's int64, a step counter, a seed): a larger one would fail, or
# run for ever, deep inside the run.
INTEGER_LIMIT = 2**63


def first_leaf(key: str, value: Any, wrong: Callable[[Any], bool]) -> tuple[str, Any] | None:
    """The first value in ``value`` (nested lists and mappings too) that is ``wrong``, and its key."""
    if isinstance(value, Mapping):
        inside = ((f"{key}.{name}", item) for name, item in value.items())
    elif isinstance(value, list | tuple):
        inside = ((key, item) for item in value)
    else:
        return (key, value) if wrong(value) else None
    return next((found for at, item in inside if (found := first_leaf(at, item, wrong)) is not None), None)


def oversized_integer(key: str, value: Any) -> tuple[str, int] | None:
    """The first integer in ``value`` (nested lists and mappings too) outside [-2**63, 2**63), and the
    key it is at."""
    return first_leaf(
        key,
        value,
        lambda item: (
            isinstance(item, int)
            and not isinstance(item, bool)
            and not -INTEGER_LIMIT <= item < INTEGER_LIMIT
        ),
    )


def check_integer_size(key: str, value: Any) -> None:
    found = oversized_integer(key, value)
    if found is not None:
        at, number = found
        given = show(value) if at == key and len(show(value)) <= 200 else show(number)
        raise ConfigError(
            f"{at}={given} is not allowed; {number} does not fit in 64 bits: integers must be in "
            "[-2**63, 2**63)"
        )


def nan_inside(key: str, value: Any) -> str | None:
    """The key of the first NaN in ``value`` (nested lists and mappings too)."""
    found = first_leaf(key, value, lambda item: isinstance(item, float) and math.isnan(item))
    return None if found is None else found[0]


def check_not_nan(key: str, value: Any) -> None:
    """No NaN anywhere, the open ``_target_`` mappings' arguments too (``scheduler.factor``,
    ``callbacks.early_stopping.min_delta``): every comparison with NaN is false, so a threshold, a factor
    or a bound of NaN silently turns its mechanism off. A setting that takes NaN says so in its rule."""
    at = nan_inside(key, value)
    declared = SETTINGS.get(at) if at is not None else None
    if at is None or (declared is not None and declared.rule is not None and declared.rule.accepts(math.nan)):
        return
    raise ConfigError(
        f"{at}=nan is not allowed; {at} must be a number (NaN compares false with everything, so it would "
        "silently turn off what it sets)"
    )


def check_value(key: str, value: Any) -> None:
    check_integer_size(key, value)
    declared = SETTINGS.get(key)
    if declared is not None and declared.rule is not None and not declared.rule.accepts(value):
        raise ConfigError(f"{key}={show(value)} is not allowed; {key} must be {declared.rule.allowed}")
    check_not_nan(key, value)


def check_top_level_key(
    key: str, given: str, extra_known: Iterable[str] = (), nested: Callable[[], Iterable[str]] = tuple
) -> None:
    """``given`` is what the user wrote (``foo=1``), to quote it back. ``nested()``: keys inside the
    config groups' options (``optimizer.lr``), offered where the user left out their section; asked only
    for a key that is not known (it may read every option's file)."""
    top = key.split(".")[0]
    known = TOP_LEVEL_KEYS | set(extra_known)
    if top not in known:
        inside = sorted({name for name in [*SETTINGS, *nested()] if name.endswith("." + key)})
        hint = f"did you mean {' or '.join(inside)}? " if inside else ""
        raise ConfigError(
            f"{given}: '{top}' is not a config key; {hint}known top-level keys: " + ", ".join(sorted(known))
        )


def check_section_key(key: str, given: str) -> None:
    """A key inside one of the schema's sections (``trainer.max_step``) must be one it declares; the
    open ``_target_`` mappings (model, optimizer, ...) take any key."""
    parts = key.split(".")
    if len(parts) < 2 or parts[0] in SETTINGS or parts[0] not in TOP_LEVEL_KEYS:
        return
    if any(".".join(parts[:n]) in SETTINGS for n in range(2, len(parts) + 1)):
        return
    known = dict.fromkeys(name.split(".")[1] for name in SETTINGS if name.startswith(parts[0] + "."))
    near = closest_name(parts[1], known)
    hint = f"did you mean {parts[0]}.{near}? " if near else ""
    raise ConfigError(f"{given}: {parts[0]} has no key {parts[1]}; {hint}its keys: {', '.join(known)}")


def check_deletable(key: str, given: str) -> None:
    """``~key`` may drop an argument inside an open ``_target_`` mapping (``~model.dropout``), not one
    of runner's settings: the schema would put its default back without a word."""
    top = key.split(".")[0]
    if key not in SETTINGS or ("." in key and top in SETTINGS):
        return
    declared = SETTINGS[key]
    nullable = declared.rule is not None and declared.rule.accepts(None)
    raise ConfigError(
        f"{given}: {key} is one of runner's settings and cannot be deleted; set it instead ({key}=VALUE"
        + (f", or {key}=null" if nullable else "")
        + ")"
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
    for key, value in dataclasses.asdict(config).items():
        check_integer_size(key, value)
    for key in SETTINGS:
        value = value_at(config, key)
        if value is not ABSENT:
            check_value(key, value)
    for key, value in dataclasses.asdict(config).items():
        check_not_nan(key, value)

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
    for section in ("metrics", "callbacks"):
        for name, spec in getattr(config, section).items():
            if not has_target(spec):
                raise ConfigError(
                    f"{section}.{name}={show(spec)} has no _target_; each entry of {section} must be a "
                    f"config with a _target_ (pick them with {section}=[NAME,...]; values set for "
                    f"{section}.{name} stay when {section}=... leaves its option out)"
                )
    if config.data.collate_fn is not None and not has_target(config.data.collate_fn):
        raise ConfigError(
            f"data.collate_fn={show(config.data.collate_fn)} has no _target_; set data.collate_fn._target_ "
            "to a class building a collator (or a function, with _partial_: true), or null"
        )
    check_scheduler(config.scheduler)
    check_trainable_only(config)
    check_loggers_installed(config.logger)
    monitors = {
        "checkpoint.monitor": config.checkpoint.monitor,
        "scheduler.monitor": config.scheduler.get("monitor"),
    }
    monitors |= {f"callbacks.{name}.monitor": spec.get("monitor") for name, spec in config.callbacks.items()}
    check_monitored(monitors, ["val/loss", *(f"val/{name}" for name in config.metrics)])

    for section in ("model", "optimizer", "loss"):
        if not has_target(getattr(config, section)):
            raise ConfigError(
                f"{section}._target_ is not set; {section} must be a config with a _target_ "
                f"(pick one with {section}=NAME or set {section}._target_=dotted.path)"
            )
    if not has_target(config.data.dataset):
        raise ConfigError(
            "data.dataset._target_ is not set; data.dataset must have a _target_ returning "
            "(train, val) or (train, val, test) data sets"
        )


def check_scheduler(scheduler: Mapping[str, Any]) -> None:
    if has_target(scheduler) and "name" in scheduler:
        raise ConfigError(
            f"scheduler has both name={scheduler['name']} and _target_={scheduler['_target_']}; "
            "use one: a named schedule (scheduler=none|cosine|step) or a _target_ scheduler"
        )
    if not has_target(scheduler):
        if "name" not in scheduler:
            raise ConfigError("scheduler has neither name nor _target_; pick one with scheduler=NAME")
        if scheduler.get("interval", "step") != "step" or scheduler.get("monitor") is not None:
            raise ConfigError(
                f"scheduler.name={scheduler['name']} steps once per optimizer step; scheduler.interval "
                "and scheduler.monitor apply to _target_ schedulers (scheduler=plateau, or "
                "scheduler._target_=...)"
            )


def check_trainable_only(config: RunConfig) -> None:
    """``checkpoint.trainable_only`` leaves the frozen weights out of the model's state dict: what keeps
    them whole elsewhere is refused rather than filling the checkpoint back up."""
    if not config.checkpoint.trainable_only:
        return
    if config.strategy == "fsdp":
        raise ConfigError(
            "checkpoint.trainable_only=true with strategy=fsdp: sharded checkpoints save every weight; "
            "use strategy=ddp (or none) for a trainable-only checkpoint"
        )
    for name, spec in config.callbacks.items():
        if spec.get("_target_") == "runner.training.callbacks.EMA":
            raise ConfigError(
                f"checkpoint.trainable_only=true with callbacks.{name} (ema): the averages cover every "
                "weight, the frozen ones too, and are saved whole; leave out one of them"
            )


def check_loggers_installed(loggers: list[str]) -> None:
    """A tracker named in ``logger`` whose library is not installed is refused before anything is
    written (a run that trained for hours would otherwise have lost its tracker at the start)."""
    for name in loggers:
        package = TRACKERS[name].package  # an optional extra of runner's of the tracker's name
        if package is not None and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"logger=[{','.join(loggers)}]: {name} is not installed; install it with "
                f'pip install "runner[{name}]" (or pip install {package}), or leave {name} out of logger'
            )
