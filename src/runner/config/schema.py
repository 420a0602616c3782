"""The typed config schema. Every setting is declared once, here: its type and default, its allowed
values, whether a resumed run may change it and whether it is a hyperparameter. YAML only selects and
overrides. ``_target_`` groups (model, data set, optimizer, loss) stay open mappings: any callable
and its arguments; the few keys runner knows inside them are declared with ``keys=``."""

import re
from dataclasses import dataclass
from typing import Any

from runner.config.settings import (
    BOOLEAN,
    Rule,
    Setting,
    declared_settings,
    int_at_least,
    is_int,
    number_above,
    one_of,
    setting,
)

DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
PRECISIONS = ("fp32", "amp", "bf16")
MONITORS = ("val/loss", "val/acc")


@dataclass
class TrainerConfig:
    max_steps: int | None = setting(
        None, rule=int_at_least(1, nullable=True, null_means="no step limit"), resume="may_change"
    )
    max_epochs: int | None = setting(
        20, rule=int_at_least(1, nullable=True, null_means="no epoch limit"), resume="may_change"
    )
    log_every_n_steps: int = setting(10, rule=int_at_least(1), resume="may_change")
    val_every_n_epochs: int | None = setting(
        1, rule=int_at_least(1, nullable=True, null_means="not per epoch"), resume="may_change"
    )
    val_every_n_steps: int | None = setting(
        None, rule=int_at_least(1, nullable=True, null_means="not per step"), resume="may_change"
    )


@dataclass
class DataConfig:
    # Any callable returning (train_dataset, val_dataset) of map-style datasets of (input, target).
    dataset: Any = setting()
    # Shape of one input and number of model outputs; model configs interpolate them.
    input_shape: list[int] = setting()
    num_outputs: int = setting()
    batch_size: int = setting(32, rule=int_at_least(1), hparam=True)
    shuffle: bool = setting(True, rule=BOOLEAN)
    num_workers: int = setting(0, rule=int_at_least(0), resume="may_change")


@dataclass
class SchedulerConfig:
    name: str = setting("none", rule=one_of("none", "cosine", "step"))
    warmup_steps: int = setting(0, rule=int_at_least(0))
    min_lr: float = setting(0.0, rule=number_above(0, inclusive=True))
    step_size: int = setting(100, rule=int_at_least(1))
    gamma: float = setting(0.1, rule=number_above(0, inclusive=False))


@dataclass
class CheckpointConfig:
    enabled: bool = setting(True, rule=BOOLEAN, resume="may_change")
    every_n_steps: int | None = setting(
        None, rule=int_at_least(1, nullable=True, null_means="not per step"), resume="may_change"
    )
    every_n_epochs: int | None = setting(
        1, rule=int_at_least(1, nullable=True, null_means="not per epoch"), resume="may_change"
    )
    keep_last: int = setting(2, rule=int_at_least(1), resume="may_change")
    # Also what the run returns to sweepers: the best value of this metric.
    monitor: str = setting("val/loss", rule=one_of(*MONITORS), resume="may_change")
    mode: str = setting("min", rule=one_of("min", "max"), resume="may_change")
    save_best: bool = setting(True, rule=BOOLEAN, resume="may_change")


@dataclass
class RunConfig:
    device: str = setting(
        "auto",
        rule=Rule(
            "auto, cpu, cuda, cuda:N or mps",
            lambda v: isinstance(v, str) and DEVICE_PATTERN.fullmatch(v) is not None,
        ),
        resume="may_change",
    )
    seed: int | None = setting(
        0,
        rule=Rule(
            "an integer in [0, 2**32), or null (draw one and record it)",
            lambda v: v is None or (is_int(v) and 0 <= v < 2**32),
        ),
        hparam=True,
    )
    deterministic: bool = setting(False, rule=BOOLEAN)
    precision: str = setting("fp32", rule=one_of(*PRECISIONS), hparam=True)
    clip: float | None = setting(
        1.0, rule=number_above(0, inclusive=False, nullable=True, null_means="no clipping"), hparam=True
    )
    accumulate: int = setting(1, rule=int_at_least(1), hparam=True)
    # A non-finite gradient: stop before it is applied (raise), skip the step (skip), or no check (off).
    on_nonfinite: str = setting("raise", rule=one_of("raise", "skip", "off"))
    max_nonfinite_in_a_row: int = setting(5, rule=int_at_least(1))
    # Speed: torch.compile the model; TF32 matmuls on GPUs that have them; channels-last conv models.
    compile: bool = setting(False, rule=BOOLEAN)
    tf32: bool = setting(True, rule=BOOLEAN)
    channels_last: bool = setting(False, rule=BOOLEAN)
    trainer: TrainerConfig = setting(TrainerConfig)
    data: DataConfig = setting(DataConfig)
    model: Any = setting(resume="weights", keys={"_target_": Setting(resume="weights", hparam=True)})
    optimizer: Any = setting(
        keys={
            "_target_": Setting(hparam=True),
            "lr": Setting(number_above(0, inclusive=True), hparam=True),
            "weight_decay": Setting(number_above(0, inclusive=True), hparam=True),
            "momentum": Setting(number_above(0, inclusive=True)),
        }
    )
    scheduler: SchedulerConfig = setting(SchedulerConfig)
    loss: Any = setting()
    checkpoint: CheckpointConfig = setting(CheckpointConfig)
    # A checkpoint file, a run directory, "latest" (newest valid checkpoint under outputs/), or "auto"
    # (this run directory's own newest checkpoint, if any: for jobs a scheduler reruns in place).
    resume: str | None = setting(
        None,
        rule=Rule(
            "a checkpoint file, a run directory, latest, or auto",
            lambda v: v is None or (isinstance(v, str) and v != ""),
        ),
        resume="may_change",
    )


SETTINGS: dict[str, Setting] = declared_settings(RunConfig)
TOP_LEVEL_KEYS = frozenset(key.split(".")[0] for key in SETTINGS)
HPARAM_KEYS = tuple(key for key, declared in SETTINGS.items() if declared.hparam)


def resume_policy(key: str) -> str:
    """The policy of the most specific declared setting that covers ``key`` (``optimizer.betas`` falls
    under ``optimizer``)."""
    while key not in SETTINGS and "." in key:
        key = key.rpartition(".")[0]
    return SETTINGS[key].resume if key in SETTINGS else "same"
