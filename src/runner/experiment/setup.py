"""From a typed config to the objects a run trains: device, seeds, precision, model, data, loaders.
What ``train``, doctor, ``lr_find`` and ``eval`` share.

Hydra-free: ``_target_`` configs become objects through the ``build`` function handed in (Hydra's
``instantiate`` from the command line), so a run can also be set up from plain Python.
"""

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, default_collate

from runner.config.closest import unexpected_argument_hint
from runner.config.errors import ConfigError, show
from runner.config.schema import RunConfig
from runner.data.loading import EpochSampler, is_stream, make_loaders
from runner.experiment.optimizers import named_optimizers, named_schedules, own_step_optimizer
from runner.experiment.param_groups import (
    check_group_options,
    freeze_parameters,
    named_groups,
    no_decay_split,
    offered_by_name,
)
from runner.training.collation import check_validation_collation
from runner.training.device import resolve_device
from runner.training.distributed import ProcessInfo
from runner.training.manual_step import check_signature, writes_own_step
from runner.training.named_optimizers import NamedOptimizers
from runner.training.precision import Precision, resolve_precision
from runner.training.reduction import check_reduction
from runner.training.schedules import Schedule, build_scheduler, fill_planned, named_schedule, schedule_of
from runner.training.seeding import seed_everything, seeded

Build = Callable[..., Any]


# Whose constructors' complaints are about the values the user gave: runner's and torch's own.
OWN_PACKAGES = ("runner", "torch")


def build_component(build: Build, key: str, spec: Mapping[str, Any], *args: Any) -> Any:
    """Build one ``_target_`` config. A target that cannot be imported or called with the config's
    arguments is a one-line error naming the key, and so is a value runner's or torch's own
    constructors refuse (``model.dropout=1.5``); an error raised inside user code keeps its traceback."""
    try:
        return build(spec, *args)
    except Exception as error:
        cause = error
        while cause.__cause__ is not None:  # Hydra wraps the error that says what went wrong
            cause = cause.__cause__
        target = str(spec.get("_target_", ""))
        if isinstance(cause, ValueError | RuntimeError | LookupError | OSError) and target.startswith(
            tuple(f"{package}." for package in OWN_PACKAGES)
        ):
            given = ", ".join(
                f"{name}={show(value)}" for name, value in spec.items() if not name.startswith("_")
            )
            reason = f"{type(cause).__name__}: {cause}".splitlines()[0]
            raise ConfigError(f"{key}: {target} refused {given or 'its arguments'} ({reason})") from None
        if not isinstance(cause, ImportError | AttributeError | TypeError):
            raise cause from None
        reason = f"{type(cause).__name__}: {cause}".splitlines()[0]
        where = (
            " (is its package installed, or its folder on PYTHONPATH?)"
            if isinstance(cause, ImportError)
            else ""
        )
        where += unexpected_argument_hint(key, target, cause)
        raise ConfigError(
            f"{key}._target_={show(spec.get('_target_'))} could not be built ({reason}){where}; "
            f"{key}._target_ must be an importable dotted path to a callable that accepts "
            "the other keys as arguments"
        ) from None


NORM_LAYERS = (
    torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm,
    torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.InstanceNorm3d,
    torch.nn.GroupNorm, torch.nn.LayerNorm, torch.nn.RMSNorm,
)  # fmt: skip


def is_norm_layer(module: torch.nn.Module) -> bool:
    """torch's normalisation layers, and a model's own (``LlamaRMSNorm``, ``T5LayerNorm``) by name."""
    return isinstance(module, NORM_LAYERS) or "Norm" in type(module).__name__


def parameter_groups(model: torch.nn.Module, no_decay: Sequence[str]) -> list[dict[str, Any]]:
    """``decay`` and ``no_decay`` groups: a parameter whose name contains one of ``no_decay`` (``bias``)
    has no weight decay; with ``norm`` in it, so has every parameter of a normalisation layer. Only
    trainable parameters; an empty group is left out."""
    in_norm_layers = set()
    if "norm" in no_decay:
        for module in model.modules():
            if is_norm_layer(module):
                in_norm_layers.update(id(p) for p in module.parameters(recurse=False))
    decay, exempt = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if id(parameter) in in_norm_layers or any(part in name for part in no_decay):
            exempt.append(parameter)
        else:
            decay.append(parameter)
    groups = [{"name": "decay", "params": decay}, {"name": "no_decay", "params": exempt, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def build_optimizer(build: Build, config: RunConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """``optimizer.no_decay`` makes two parameter groups; without it the optimizer gets every
    parameter, as a hand-written loop does. ``optimizer.param_groups`` and ``freeze`` choose them by
    name, and a builder of one's own may ask for ``named_parameters`` or ``model`` (param_groups.py).
    ``optimizers``: several, each over a named part (optimizers.py). A model that writes its own step
    gets its optimizers named, and with them that step (``optimizers.chosen_step``)."""
    own_step = writes_own_step(model)
    if own_step:
        check_signature(model)
    if config.optimizers:
        return named_optimizers(config, model, lambda *args: build_component(build, *args))
    optimizer = run_optimizer(build, config, model)
    return own_step_optimizer(config, optimizer) if own_step else optimizer


def run_optimizer(build: Build, config: RunConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The run's one optimizer (``optimizer``), over the model's trainable parameters."""
    spec = dict(config.optimizer)
    no_decay = spec.pop("no_decay", None)
    if group_specs := spec.pop("param_groups", None):
        params = named_groups(model, group_specs, no_decay_split(model, no_decay, is_norm_layer))
    elif no_decay:
        params = parameter_groups(model, no_decay)
    else:
        params = [p for p in model.parameters() if p.requires_grad] if config.freeze else model.parameters()
    if not str(spec.get("_target_", "")).startswith("torch.optim."):
        partial = build_component(build, "optimizer", {**spec, "_partial_": True})
        if given := offered_by_name(partial, model, params):
            return build_component(lambda _: partial(**given), "optimizer", spec)
    optimizer = build_component(build, "optimizer", spec, params)
    check_group_options(optimizer, group_specs or [])
    return optimizer


def build_named(build: Build, section: str, specs: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` and ``callbacks``: each entry a ``_target_`` object, by name. A constructor that
    refuses its arguments (``ValueError``) is a one-line error naming the entry."""
    built = {}
    for name, spec in specs.items():
        try:
            built[name] = build_component(build, f"{section}.{name}", spec)
        except ConfigError:
            raise
        except ValueError as error:
            raise ConfigError(f"{section}.{name}: {str(error).splitlines()[0]}") from None
    return built


def build_schedule(
    build: Build, spec: Mapping[str, Any], optimizer: torch.optim.Optimizer, total_steps: int,
    steps_per_epoch: int | None,
) -> Schedule:  # fmt: skip
    """A named schedule, or any ``_target_`` scheduler built with the optimizer and its other keys
    (``${total_steps}`` and ``${steps_per_epoch}`` filled in). ``ReduceLROnPlateau`` steps on
    ``monitor`` after each validation, timm's as timm's loop steps them (schedules.py). Several
    optimizers: each its own (experiment/optimizers.py)."""
    if isinstance(optimizer, NamedOptimizers):
        return named_schedules(
            optimizer, lambda *args: build_schedule(build, *args, total_steps, steps_per_epoch)
        )
    if "_target_" not in spec:
        return Schedule(build_scheduler(optimizer, total_steps=total_steps, **named_schedule(spec)))
    arguments = {key: value for key, value in spec.items() if key not in ("interval", "monitor")}
    arguments = fill_planned(arguments, {"total_steps": total_steps, "steps_per_epoch": steps_per_epoch})
    scheduler = build_component(build, "scheduler", arguments, optimizer)
    return schedule_of(scheduler, spec["_target_"], spec.get("interval", "step"), spec.get("monitor"))


@dataclass
class Components:
    model: torch.nn.Module
    train_set: Any
    val_set: Any
    loss_fn: Callable
    test_set: Any = None


def build_model(build: Build, config: RunConfig) -> torch.nn.Module:
    model = build_component(build, "model", config.model)
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model._target_={config.model['_target_']} built a {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def build_model_as_run(build: Build, config: RunConfig, seed: int) -> torch.nn.Module:
    """The model as a run of ``seed`` built it (seeded, then the model first), the random states left as
    they were: a randomly initialised base it froze has the weights it trained on."""
    with seeded(seed):
        return build_model(build, config)


def build_model_and_data(config: RunConfig, build: Build, device: torch.device) -> Components:
    """Model first, then data: a hand-written loop's order, so a seed gives the same weights."""
    model = build_model(build, config)
    datasets = build_component(build, "data.dataset", config.data.dataset)
    if not (isinstance(datasets, tuple | list) and len(datasets) in (2, 3)):
        raise ConfigError(
            f"data.dataset._target_={config.data.dataset['_target_']} returned {type(datasets).__name__}; "
            "it must return (train, val) or (train, val, test) data sets"
        )
    for name, dataset in zip(("training", "validation", "test"), datasets, strict=False):
        if hasattr(dataset, "__len__") and len(dataset) == 0:
            raise ConfigError(
                f"data.dataset._target_={config.data.dataset['_target_']} returned an empty {name} set "
                f"(0 samples); a run needs samples to {'train on' if name == 'training' else 'evaluate on'}"
            )
    freeze_parameters(model, config.freeze)  # before any wrapper or optimizer sees requires_grad
    loss_fn = build_component(build, "loss", config.loss)
    check_reduction(loss_fn)
    test_set = datasets[2] if len(datasets) == 3 else None
    return Components(model.to(device), datasets[0], datasets[1], loss_fn, test_set)


@dataclass
class Prepared:
    device: torch.device
    precision: Precision
    parts: Components
    train_loader: DataLoader
    val_loader: DataLoader
    train_sampler: EpochSampler


def prepare(config: RunConfig, build: Build, seed: int, process: ProcessInfo | None = None) -> Prepared:
    """Device, seeds, precision, model, data and loaders. With several processes each takes its own
    GPU (``LOCAL_RANK``) and its shard of the data; one process takes the current GPU (a parallel sweep
    job's own, see ``runner.search.claims``), named by its index."""
    process = process or ProcessInfo()
    check_num_workers(config.data.num_workers)
    device = resolve_device(config.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device(
            "cuda", process.local_rank if process.distributed else torch.cuda.current_device()
        )
        torch.cuda.set_device(device)
    seed_everything(seed, config.deterministic)
    precision = resolve_precision(config.precision, device)
    parts = build_model_and_data(config, build, device)
    data = config.data
    collate_fn = build_collate_fn(build, config)
    val_collate_fn = build_collate_fn(build, config, validation=True)
    order = build_sampler(build, config, parts.train_set, seed)
    train_loader, val_loader, train_sampler = make_loaders(
        parts.train_set, parts.val_set, data.batch_size, data.shuffle, data.num_workers, seed,
        pin_memory=device.type == "cuda", rank=process.rank, world_size=process.world_size,
        val_batch_size=data.val_batch_size, drop_last=data.drop_last, collate_fn=collate_fn, order=order,
        val_collate_fn=val_collate_fn,
        sample_seeds=data.sample_seeds, prefetch_factor=data.prefetch_factor,
        persistent_workers=data.persistent_workers,
    )  # fmt: skip
    key = "data.collate_fn" if data.val_collate_fn is None else "data.val_collate_fn"
    check_validation_collation(val_loader, key)  # before anything is written, not an epoch later
    return Prepared(device, precision, parts, train_loader, val_loader, train_sampler)


WORKERS_PER_CPU = 4


def usable_cpus() -> int:
    """The CPUs this process may run on (a scheduler's share), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worker_limit() -> int:
    """The most loader workers a run here may start: each is a process."""
    return WORKERS_PER_CPU * usable_cpus()


def check_num_workers(num_workers: int) -> None:
    """More than a few loader workers per CPU only slows the run, and a huge number forks until the
    machine stops. Checked here, on the machine that runs, not with the config (a checkpoint's config
    from a larger machine still resumes, with a smaller ``data.num_workers``)."""
    cpus = usable_cpus()
    limit = worker_limit()
    if num_workers > limit:
        raise ConfigError(
            f"data.num_workers={num_workers} is not allowed; data.num_workers must be an integer in "
            f"[0, {limit}] ({WORKERS_PER_CPU} x the {cpus} CPUs this process may use)"
        )


def build_collate_fn(build: Build, config: RunConfig, validation: bool = False) -> Callable | None:
    """``data.collate_fn``, or with ``validation`` the validation batches' (``data.val_collate_fn``:
    null is ``data.collate_fn``'s, ``default`` torch's ``default_collate``); None: torch's default."""
    key, spec = "data.collate_fn", config.data.collate_fn
    if validation and config.data.val_collate_fn is not None:
        if config.data.val_collate_fn == "default":
            return default_collate
        key, spec = "data.val_collate_fn", config.data.val_collate_fn
    if spec is None:
        return None
    collate_fn = build_component(build, key, spec)
    if not callable(collate_fn):
        raise ConfigError(
            f"{key}._target_={spec['_target_']} built a {type(collate_fn).__name__}, which cannot be "
            "called; point it at a collator class, or at a function with _partial_: true"
        )
    return collate_fn


def build_sampler(build: Build, config: RunConfig, train_set: Any, seed: int) -> Any:
    """``data.sampler``, given what its signature asks for and its config does not set, as a loop
    builds it: the training set (``data_source`` or ``dataset``), a generator seeded with the run's
    seed (``generator``), the seed itself (``seed``)."""
    spec = config.data.sampler
    if spec is None:
        return None
    if is_stream(train_set):
        raise ConfigError(
            f"data.sampler._target_={spec['_target_']}: the training set is a stream (IterableDataset), "
            "which has no indices to order; set data.sampler=null"
        )
    partial = build_component(build, "data.sampler", {**spec, "_partial_": True})
    offered = {
        "data_source": train_set,
        "dataset": train_set,
        "generator": torch.Generator().manual_seed(seed),
        "seed": seed,
    }
    wanted = inspect.signature(partial).parameters
    given = {name: value for name, value in offered.items() if name in wanted and name not in spec}
    sampler = build_component(lambda _: partial(**given), "data.sampler", spec)
    if not (hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
        raise ConfigError(
            f"data.sampler._target_={spec['_target_']} built a {type(sampler).__name__}, which is not a "
            "sampler: it must have __iter__ (the indices of one epoch) and __len__"
        )
    if isinstance(sampler, DistributedSampler):
        raise ConfigError(
            f"data.sampler._target_={spec['_target_']}: runner splits the order across processes itself; "
            "give a sampler of the whole training set (RandomSampler, or your own order)"
        )
    return sampler
