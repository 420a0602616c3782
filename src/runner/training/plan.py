"""What the loop is told (:class:`LoopSettings`) and how many optimizer steps that plans."""

import math
from dataclasses import dataclass
from typing import Any

from runner.config.errors import ConfigError


@dataclass(frozen=True)
class LoopSettings:
    """What the loop is told, every value given: from a run's config, ``experiment/assembly.py``'s
    ``loop_settings`` (the defaults are the schema's, in ``config/schema.py``)."""

    max_steps: int | None
    max_epochs: int | None
    micro_batches_per_step: int
    clip_norm: float | None
    log_every_n_steps: int
    val_every_n_epochs: int | None
    val_every_n_steps: int | None
    monitor: str
    monitor_mode: str
    metrics: dict[str, Any]  # name -> metric
    on_nonfinite: str  # "raise", "skip", or "off" (no check: no host read per step)
    max_nonfinite_in_a_row: int
    # "split" (halve the micro-batch and redo the step: oom.py) or "raise". The one default here, the
    # schema's, so that a loop built by hand (the oracle tests') is as it was before the setting existed.
    on_oom: str = "split"


def steps_per_epoch(micro_batches_per_epoch: int, micro_batches_per_step: int) -> int:
    """A short last window still makes one optimizer step."""
    return math.ceil(micro_batches_per_epoch / micro_batches_per_step)


def planned_steps(settings: LoopSettings, micro_batches_per_epoch: int | None) -> int:
    """``micro_batches_per_epoch=None``: a stream, whose length is unknown; ``max_steps`` plans it."""
    limits = [settings.max_steps] if settings.max_steps is not None else []
    if settings.max_epochs is not None and micro_batches_per_epoch is not None:
        limits.append(
            settings.max_epochs * steps_per_epoch(micro_batches_per_epoch, settings.micro_batches_per_step)
        )
    if micro_batches_per_epoch == 0:
        raise ConfigError(
            "an epoch has no batch: with data.drop_last=true, data.batch_size is larger than the "
            "training samples each process gets; lower data.batch_size or set data.drop_last=false"
        )
    if not limits:
        raise ConfigError(
            "the training data is a stream (IterableDataset) of unknown length, so trainer.max_epochs "
            "cannot plan the run; set trainer.max_steps"
        )
    return min(limits)
