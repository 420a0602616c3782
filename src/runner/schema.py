"""The typed config schema: every setting's one default lives here; YAML selects and overrides."""

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class TrainerConfig:
    max_steps: int | None = None
    max_epochs: int | None = 20
    log_every_n_steps: int = 10
    val_every_n_epochs: int | None = 1
    val_every_n_steps: int | None = None


@dataclass
class DataConfig:
    # Any callable returning (train_dataset, val_dataset) of map-style datasets of (input, target).
    dataset: Any = MISSING
    # Shape of one input and number of model outputs; model configs interpolate them.
    input_shape: list[int] = MISSING
    num_outputs: int = MISSING
    batch_size: int = 32
    shuffle: bool = True
    num_workers: int = 0


@dataclass
class SchedulerConfig:
    name: str = "none"
    warmup_steps: int = 0
    min_lr: float = 0.0
    step_size: int = 100
    gamma: float = 0.1


@dataclass
class CheckpointConfig:
    enabled: bool = True
    every_n_steps: int | None = None
    every_n_epochs: int | None = 1
    keep_last: int = 2
    # Also what the run returns to sweepers: the best value of this metric.
    monitor: str = "val/loss"
    mode: str = "min"
    save_best: bool = True


@dataclass
class RunConfig:
    device: str = "auto"
    seed: int | None = 0
    deterministic: bool = False
    precision: str = "fp32"
    clip: float | None = 1.0
    accumulate: int = 1
    # A non-finite gradient: stop before it is applied (raise), skip the step (skip), or no check (off).
    on_nonfinite: str = "raise"
    max_nonfinite_in_a_row: int = 5
    # Speed: torch.compile the model; TF32 matmuls on GPUs that have them; channels-last conv models.
    compile: bool = False
    tf32: bool = True
    channels_last: bool = False
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = MISSING
    model: Any = MISSING
    optimizer: Any = MISSING
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    loss: Any = MISSING
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # A checkpoint file, a run directory, "latest" (newest valid checkpoint under outputs/), or "auto"
    # (this run directory's own newest checkpoint, if any: for jobs a scheduler reruns in place).
    resume: str | None = None
