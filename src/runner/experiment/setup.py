"""From a typed config to the objects a run trains: device, seeds, precision, model, data, loaders.
What ``train``, doctor, ``lr_find`` and ``eval`` share.

Hydra-free: ``_target_`` configs become objects through the ``build`` function handed in (Hydra's
``instantiate`` from the command line), so a run can also be set up from plain Python.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from runner.config.errors import ConfigError, show
from runner.config.schema import RunConfig
from runner.data.loading import EpochSampler, make_loaders
from runner.training.device import resolve_device
from runner.training.distributed import ProcessInfo
from runner.training.precision import Precision, resolve_precision
from runner.training.seeding import seed_everything

Build = Callable[..., Any]


def build_component(build: Build, key: str, spec: Mapping[str, Any], *args: Any) -> Any:
    """Build one ``_target_`` config. A target that cannot be imported or called with the config's
    arguments is a one-line error naming the key; an error raised inside user code keeps its
    traceback."""
    try:
        return build(spec, *args)
    except Exception as error:
        cause = error
        while cause.__cause__ is not None:  # Hydra wraps the error that says what went wrong
            cause = cause.__cause__
        if not isinstance(cause, ImportError | AttributeError | TypeError):
            raise cause from None
        reason = f"{type(cause).__name__}: {cause}".splitlines()[0]
        raise ConfigError(
            f"{key}._target_={show(spec.get('_target_'))} could not be built ({reason}); "
            f"{key}._target_ must be an importable dotted path to a callable that accepts "
            "the other keys as arguments"
        ) from None


def build_optimizer(build: Build, config: RunConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    return build_component(build, "optimizer", config.optimizer, model.parameters())


@dataclass
class Components:
    model: torch.nn.Module
    train_set: Any
    val_set: Any
    loss_fn: Callable


def build_model_and_data(config: RunConfig, build: Build, device: torch.device) -> Components:
    """Model first, then data: the template's order, so a seed gives the same weights."""
    model = build_component(build, "model", config.model)
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model._target_={config.model['_target_']} built a {type(model).__name__}, not a torch.nn.Module"
        )
    datasets = build_component(build, "data.dataset", config.data.dataset)
    if not (isinstance(datasets, tuple | list) and len(datasets) == 2):
        raise ConfigError(
            f"data.dataset._target_={config.data.dataset['_target_']} must return "
            "(train_dataset, val_dataset)"
        )
    loss_fn = build_component(build, "loss", config.loss)
    return Components(model.to(device), datasets[0], datasets[1], loss_fn)


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
    GPU (``LOCAL_RANK``) and its shard of the data."""
    process = process or ProcessInfo()
    device = resolve_device(config.device)
    if process.distributed and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", process.local_rank)
        torch.cuda.set_device(device)
    seed_everything(seed, config.deterministic)
    precision = resolve_precision(config.precision, device)
    parts = build_model_and_data(config, build, device)
    data = config.data
    train_loader, val_loader, train_sampler = make_loaders(
        parts.train_set, parts.val_set, data.batch_size, data.shuffle, data.num_workers, seed,
        pin_memory=device.type == "cuda", rank=process.rank, world_size=process.world_size,
    )  # fmt: skip
    return Prepared(device, precision, parts, train_loader, val_loader, train_sampler)
