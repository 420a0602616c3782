"""``optimizers:``: several optimizers, each over a named part of the model, for a model that writes
its own training step (``training/manual_step.py``). Each entry is an optimizer config (``_target_``
and its arguments) with ``params`` (glob patterns over the parameter names), and optionally ``clip``
(the run's ``clip`` by default) and ``scheduler`` (the run's ``scheduler`` by default)."""

from collections.abc import Callable, Mapping
from typing import Any

import torch

from runner.config.checks import check_scheduler
from runner.config.errors import ConfigError, show
from runner.config.schema import SETTINGS, RunConfig
from runner.experiment.parallel import Spread
from runner.experiment.parts import as_patterns, matching
from runner.training.manual_step import MODELS_STEP, OWN_STEP, writes_own_step
from runner.training.named_optimizers import NamedOptimizers, NamedSchedulers
from runner.training.schedules import Schedule
from runner.training.step import RUNNERS_STEP, Step

OWN_KEYS = ("params", "clip", "scheduler")


def check_value(setting: str, value: Any, key: str) -> None:
    """``value`` under the rule of the run's ``setting`` (an optimizer's own clip takes the run's)."""
    rule = SETTINGS[setting].rule
    if rule is not None and not rule.accepts(value):
        raise ConfigError(f"{key}={show(value)} is not allowed; {key} must be {rule.allowed}")


def check_own_scheduler(scheduler: Any, key: str) -> None:
    """An optimizer's own scheduler replaces the run's whole: a name alone (``cosine``) or one setting
    (``warmup_steps``) is not one, and is refused naming the optimizer's key."""
    if not (isinstance(scheduler, Mapping) and ("name" in scheduler or "_target_" in scheduler)):
        raise ConfigError(
            f"{key}={show(scheduler)}: an optimizer's own scheduler replaces the run's and is a whole "
            "scheduler config, with name (none, cosine, step) or _target_, such as "
            f"{key}={{name: cosine, warmup_steps: 5}}"
        )
    check_scheduler(scheduler)


def named_optimizers(
    config: RunConfig, model: torch.nn.Module, build_one: Callable[..., Any]
) -> NamedOptimizers:
    """``build_one(key, spec, params)`` builds one ``_target_`` config (``setup.build_component``).
    Every trainable parameter belongs to exactly one optimizer: one in none, or in two, is refused."""
    if not writes_own_step(model):
        raise ConfigError(
            f"optimizers: {', '.join(config.optimizers)} is set, but {type(model).__name__} has no "
            f"{OWN_STEP}(batch, step) method; several optimizers need a step the model writes (see "
            "'A GAN: two optimizers and a step the model writes' in the docs), else use optimizer"
        )
    if config.optimizer.get("param_groups"):  # the run's one optimizer is not built: it would be dropped
        raise ConfigError(
            "optimizer.param_groups: the run's one optimizer is not built when optimizers is set; give each "
            "part its own optimizer (optimizers.<name>.params) with its own arguments"
        )
    if config.strategy == "fsdp":
        raise ConfigError(
            "optimizers: strategy=fsdp is not supported with a step the model writes; use strategy=ddp"
        )
    owner: dict[int, str] = {}
    optimizers, clips, schedulers = {}, {}, {}
    for name, entry in config.optimizers.items():
        key = f"optimizers.{name}"
        if not isinstance(entry, Mapping) or "_target_" not in entry or "params" not in entry:
            raise ConfigError(
                f"{key} must be an optimizer config with _target_ and params (glob patterns over the "
                f"model's parameter names), such as {{params: 'generator.*', _target_: torch.optim.Adam}}"
            )
        chosen = [(n, p) for n, p in matching(model, as_patterns(entry["params"], f"{key}.params"), key)
                  if p.requires_grad]  # fmt: skip
        if not chosen:  # else torch's "empty parameter list", not saying why
            raise ConfigError(
                f"{key}.params: {', '.join(as_patterns(entry['params'], f'{key}.params'))} match only frozen "
                "parameters (freeze); each optimizer needs a trainable part: unfreeze some, or drop it"
            )
        for parameter_name, parameter in chosen:
            if id(parameter) in owner:
                raise ConfigError(
                    f"{key}.params: {parameter_name} is also in optimizers.{owner[id(parameter)]}; each "
                    "parameter belongs to one optimizer"
                )
            owner[id(parameter)] = name
        spec = {k: v for k, v in entry.items() if k not in OWN_KEYS}
        optimizers[name] = build_one(key, spec, [p for _, p in chosen])
        clips[name] = entry.get("clip", config.clip)
        check_value("clip", clips[name], f"{key}.clip")
        schedulers[name] = entry.get("scheduler", config.scheduler)
        check_own_scheduler(schedulers[name], f"{key}.scheduler")
        for setting, value in schedulers[name].items():
            if f"scheduler.{setting}" in SETTINGS:
                check_value(f"scheduler.{setting}", value, f"{key}.scheduler.{setting}")
    left = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in owner]
    if left:
        raise ConfigError(
            f"optimizers: {len(left)} trainable parameters are in no optimizer's params "
            f"({', '.join(left[:3])}{', ...' if len(left) > 3 else ''}); add a pattern that matches them"
        )
    return NamedOptimizers(optimizers, clips, schedulers)


ONE = "optimizer"  # the run's one optimizer, named by its config key in a step the model writes


def own_step_optimizer(config: RunConfig, optimizer: torch.optim.Optimizer) -> NamedOptimizers:
    """A model that writes its own step, with the run's one optimizer: its step runs, as Lightning runs a
    LightningModule's ``training_step`` (a step the model has is never ignored). The optimizer is named
    ``optimizer``, with the run's ``clip`` and ``scheduler``."""
    if config.strategy == "fsdp":
        raise ConfigError(
            f"strategy=fsdp is not supported with a step the model writes ({OWN_STEP}); use strategy=ddp"
        )
    return NamedOptimizers({ONE: optimizer}, {ONE: config.clip}, {ONE: config.scheduler})


def chosen_step(optimizer: object, spread: Spread | None = None) -> Step:
    """The step a learner carries, chosen once from what was built for it: the model's own
    ``training_step`` where its optimizers are named (``build_optimizer`` names them for such a model
    only: :func:`named_optimizers`, :func:`own_step_optimizer`), else runner's step as the model was
    spread (with several processes under DDP and ``on_oom=split``, the one that agrees on out of
    memory: ``parallel.py``)."""
    if isinstance(optimizer, NamedOptimizers):
        return MODELS_STEP
    return spread.step if spread is not None else RUNNERS_STEP


def named_schedules(named: NamedOptimizers, build_schedule: Callable[..., Schedule]) -> Schedule:
    """Each optimizer's scheduler (``build_schedule(spec, optimizer)``), stepped together: they must
    step at the same points (the same interval and monitor, all timm's or none)."""
    built = {
        name: build_schedule(named.scheduler_specs[name], named.optimizers[name]) for name in named.optimizers
    }
    first = next(iter(built.values()))
    for name, schedule in built.items():
        if (schedule.interval, schedule.monitor) != (first.interval, first.monitor) or (
            schedule.counted != first.counted
        ):
            raise ConfigError(
                f"optimizers.{name}.scheduler steps per {schedule.interval} on {schedule.monitor}, the "
                f"others per {first.interval} on {first.monitor}; every optimizer's scheduler must step alike"
            )
    schedulers = NamedSchedulers({name: schedule.scheduler for name, schedule in built.items()})
    return Schedule(schedulers, first.interval, first.monitor, first.counted)
