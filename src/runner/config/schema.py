"""The typed config schema. Every setting is declared once, here: its type and default, its allowed
values, whether a resumed run may change it and whether it is a hyperparameter. YAML only selects and
overrides. ``_target_`` groups (model, data set, optimizer, loss) stay open mappings: any callable
and its arguments; the few keys runner knows inside them are declared with ``keys=``."""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.config.settings import (
    BOOLEAN,
    PARAM_GROUPS,
    PATTERNS,
    Rule,
    Setting,
    declared_settings,
    int_at_least,
    is_int,
    number_above,
    one_of,
    setting,
)
from runner.config.trackers import TRACKERS

DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
PRECISIONS = ("fp32", "amp", "bf16")
# A validation metric: val/loss, or val/<name> of a configured metric (checked against them before a run).
MONITOR = Rule(
    "a validation metric: val/loss or val/<name> of a metric",
    lambda v: isinstance(v, str) and v.startswith("val/") and len(v) > 4,
)
NAMED_SCHEDULES = ("none", "cosine", "step")
PEER_TIMEOUT_S = 300  # peer_timeout_s's default: read before the config exists (training/distributed.py)
VAL_COLLATE = Rule(
    "null (data.collate_fn's), default (torch's default collate) or a collator's _target_ config",
    lambda v: v is None or v == "default" or (isinstance(v, Mapping) and "_target_" in v),
)
OPTIONAL_BOOLEAN = Rule("true, false or null (torch's default)", lambda v: v is None or isinstance(v, bool))


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
    # Any callable returning (train, val) or (train, val, test) data sets: map-style, or a stream
    # (IterableDataset, with trainer.max_steps), yielding batches of any structure (training/batches.py).
    dataset: Any = setting()
    # Shape of one input and number of model outputs; model configs interpolate them.
    input_shape: list[int] = setting()
    num_outputs: int = setting()
    batch_size: int = setting(32, rule=int_at_least(1))
    val_batch_size: int | None = setting(
        None, rule=int_at_least(1, nullable=True, null_means="data.batch_size"), resume="may_change"
    )
    shuffle: bool = setting(True, rule=BOOLEAN)
    # A _target_ sampler ordering the training set instead of runner's randperm(seed + epoch) (which
    # data.shuffle=false makes 0..N-1); given data_source/dataset, generator (seeded with the run's
    # seed) and seed where its signature asks for them. null: runner's order.
    sampler: Any = setting(None)
    drop_last: bool = setting(False, rule=BOOLEAN)
    num_workers: int = setting(0, rule=int_at_least(0), resume="may_change")
    # With workers: the batches each worker reads ahead (null: torch's default, 2), and whether the
    # workers of a map-style set are kept from epoch to epoch (a stream's start afresh each pass).
    prefetch_factor: int | None = setting(
        None, rule=int_at_least(1, nullable=True, null_means="torch's default, 2"), resume="may_change"
    )
    persistent_workers: bool = setting(True, rule=BOOLEAN, resume="may_change")
    # Each sample's random draws (torch's, Python's and numpy's global generators, inside __getitem__
    # and collate_fn) start from a seed of (seed, epoch, index), in workers and the main process alike:
    # the same run whatever data.num_workers. false: torch's worker seeding, the draws of runs before it.
    sample_seeds: bool = setting(True, rule=BOOLEAN)
    # A _target_ building the DataLoader's collate_fn (a padding collator); null: torch's default.
    collate_fn: Any = setting(None)
    # The validation batches' collator: null, data.collate_fn's (a padding collator pads both); default,
    # torch's default collate (a collator for training only: Mixup, CutMix); or a _target_ of its own.
    val_collate_fn: Any = setting(None, rule=VAL_COLLATE, resume="may_change")
    # Where a dict batch holds its targets, for the loss and the metrics.
    target_key: str = setting("labels", rule=Rule("a key name", lambda v: isinstance(v, str) and v != ""))


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
    monitor: str = setting("val/loss", rule=MONITOR, resume="may_change")
    mode: str = setting("min", rule=one_of("min", "max"), resume="may_change")
    save_best: bool = setting(True, rule=BOOLEAN, resume="may_change")
    # Sharded checkpoints (strategy=fsdp) are written in the background: training goes on once the
    # state is copied. Plain checkpoint files are always written in the background.
    async_save: bool = setting(False, rule=BOOLEAN, resume="may_change")
    # Only what trains (parameters with requires_grad, and buffers) and the sha256 of the frozen
    # parameters: a LoRA run's checkpoints without the base (checkpoint/trainable.py).
    trainable_only: bool = setting(False, rule=BOOLEAN, resume="may_change")


CLASS_NAMES = Rule(
    "a list of module class names, such as [Block], or null (the model's repeated blocks)",
    lambda v: v is None or (isinstance(v, list | tuple) and all(isinstance(x, str) and x for x in v)),
)


@dataclass
class FsdpConfig:
    # The modules sharded (and, with activation_checkpointing, recomputed) one by one, by class name;
    # null: the model's repeated blocks (the layers of a ModuleList of one class), else the whole model.
    wrap: list[str] | None = setting(None, rule=CLASS_NAMES)


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PROFILE_STEPS = Rule(
    "two optimizer steps [first, last] with 1 <= first <= last, such as [5, 7], or null (no profile)",
    lambda v: (
        v is None
        or (isinstance(v, list | tuple) and len(v) == 2 and all(is_int(x) for x in v) and 1 <= v[0] <= v[1])
    ),
)


@dataclass
class ProfileConfig:
    # torch.profiler records these optimizer steps into the run's profile/ folder (a Perfetto trace).
    steps: list[int] | None = setting(None, rule=PROFILE_STEPS, resume="may_change")
    # On CUDA, also a memory snapshot of the same steps (for pytorch.org/memory_viz).
    memory: bool = setting(False, rule=BOOLEAN, resume="may_change")


# Where a run's numbers go besides TensorBoard's event files: the trackers' registry (config/trackers.py).
LOGGER_LIST = Rule(
    "a list of " + ", ".join(TRACKERS) + ", each at most once, such as [tensorboard,mlflow]",
    lambda v: isinstance(v, list | tuple) and all(x in TRACKERS for x in v) and len(set(v)) == len(v),
)
OPTIONAL_NAME = Rule("a non-empty string, or null", lambda v: v is None or (isinstance(v, str) and v != ""))
NAME = Rule("a non-empty string", lambda v: isinstance(v, str) and v != "")


@dataclass
class MlflowConfig:
    # null: a SQLite store in the run's directory (a sweep's jobs: in the sweep's directory); else any
    # MLflow tracking URI (http://host:5000, sqlite:///path/mlflow.db, databricks).
    tracking_uri: str | None = setting(None, rule=OPTIONAL_NAME, resume="may_change")
    experiment: str = setting("runner", rule=NAME, resume="may_change")


@dataclass
class WandbConfig:
    project: str = setting("runner", rule=NAME, resume="may_change")
    entity: str | None = setting(None, rule=OPTIONAL_NAME, resume="may_change")
    # null: W&B's own choice (WANDB_MODE, else online); offline writes the run under the run's directory.
    mode: str | None = setting(
        None,
        rule=Rule("online, offline, disabled, or null (WANDB_MODE, else online)",
                  lambda v: v is None or v in ("online", "offline", "disabled")),
        resume="may_change",
    )  # fmt: skip


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
    )
    deterministic: bool = setting(False, rule=BOOLEAN)
    precision: str = setting("fp32", rule=one_of(*PRECISIONS))
    clip: float | None = setting(
        1.0, rule=number_above(0, inclusive=False, nullable=True, null_means="no clipping")
    )
    accumulate: int = setting(1, rule=int_at_least(1))
    # A non-finite gradient: stop before it is applied (raise), skip the step (skip), or no check (off).
    on_nonfinite: str = setting("raise", rule=one_of("raise", "skip", "off"))
    max_nonfinite_in_a_row: int = setting(5, rule=int_at_least(1))
    # Out of memory in a training step: halve the micro-batch and redo the step (split), or stop (raise);
    # auto: split with one process, raise with several (DDP keeps its overlapped gradient sync).
    on_oom: str = setting("auto", rule=one_of("auto", "split", "raise"), resume="may_change")
    # Speed: torch.compile the model; TF32 matmuls on GPUs that have them; channels-last conv models.
    compile: bool = setting(False, rule=BOOLEAN)
    # torch.compile's options (training/compiling.py); compile_regional: each repeated block compiled once.
    compile_mode: str = setting("default", rule=one_of(*COMPILE_MODES), resume="may_change")
    compile_dynamic: bool | None = setting(None, rule=OPTIONAL_BOOLEAN, resume="may_change")
    compile_fullgraph: bool = setting(False, rule=BOOLEAN, resume="may_change")
    compile_regional: bool = setting(False, rule=BOOLEAN, resume="may_change")
    profile: ProfileConfig = setting(ProfileConfig)
    tf32: bool = setting(True, rule=BOOLEAN)
    channels_last: bool = setting(False, rule=BOOLEAN)
    # With several processes (torchrun, submitit tasks): a whole model per process (ddp), or each
    # block's parameters, gradients and optimizer state sharded across them (fsdp: FSDP2).
    strategy: str = setting("ddp", rule=one_of("ddp", "fsdp"))
    fsdp: FsdpConfig = setting(FsdpConfig)
    # Recompute each block's activations in backward instead of keeping them (less memory, more time).
    activation_checkpointing: bool = setting(False, rule=BOOLEAN, resume="may_change")
    trainer: TrainerConfig = setting(TrainerConfig)
    data: DataConfig = setting(DataConfig)
    model: Any = setting(keys={"_target_": Setting()})
    # Glob patterns over the model's named_parameters() names: requires_grad=False, not in the optimizer.
    freeze: list[str] = setting([], rule=PATTERNS)
    optimizer: Any = setting(
        keys={
            "_target_": Setting(),
            "lr": Setting(number_above(0, inclusive=True)),
            "weight_decay": Setting(number_above(0, inclusive=True)),
            "momentum": Setting(number_above(0, inclusive=True)),
            "betas": Setting(
                Rule(
                    "two numbers in [0, 1), such as [0.9, 0.999]",
                    lambda v: (
                        isinstance(v, list | tuple)
                        and len(v) == 2
                        and all(
                            isinstance(b, int | float) and not isinstance(b, bool) and 0 <= b < 1 for b in v
                        )
                    ),
                )
            ),
            "fused": Setting(OPTIONAL_BOOLEAN),
            "foreach": Setting(OPTIONAL_BOOLEAN),
            # Parameters with no weight decay: names containing one of these; "norm" also takes
            # every normalisation layer's parameters, by type.
            "no_decay": Setting(
                Rule(
                    "a list of name parts",
                    lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
                ),
            ),
            # Groups chosen by name (experiment/param_groups.py): the first whose params match takes a
            # parameter, with its own optimizer arguments; the rest keep the optimizer's.
            "param_groups": Setting(PARAM_GROUPS),
        }
    )
    # name -> an optimizer over a named part of the model, for a model that writes its own step
    # (training_step): params (glob patterns over parameter names), _target_ and its arguments, and
    # optionally clip and scheduler (the run's by default). Empty: one optimizer (optimizer).
    optimizers: dict[str, Any] = setting(
        {},
        rule=Rule(
            "a mapping of names to optimizer configs (params: glob patterns, _target_, its arguments)",
            lambda v: isinstance(v, Mapping) and all(isinstance(entry, Mapping) for entry in v.values()),
        ),
    )
    # A named schedule (name: none, cosine or step, stepped per optimizer step, with warmup_steps), or
    # any _target_ scheduler (its other keys are its arguments; ${total_steps} and ${steps_per_epoch}
    # stand for the run's planned values), stepped per interval, or after each validation on monitor.
    scheduler: Any = setting(
        keys={
            "name": Setting(one_of(*NAMED_SCHEDULES)),
            "warmup_steps": Setting(int_at_least(0)),
            "min_lr": Setting(number_above(0, inclusive=True)),
            "step_size": Setting(int_at_least(1)),
            "gamma": Setting(number_above(0, inclusive=False)),
            "interval": Setting(one_of("step", "epoch")),
            "monitor": Setting(MONITOR),
        }
    )
    loss: Any = setting()
    # name -> a _target_ metric (torchmetrics' protocol), logged as val/<name>.
    metrics: dict[str, Any] = setting({}, resume="may_change")
    # name -> a _target_ callback (training/callbacks.py); its state is saved in checkpoints.
    callbacks: dict[str, Any] = setting({}, resume="may_change")
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
    # With several processes (WORLD_SIZE): how long each waits at the start for the others to join.
    # Read from the command line (the processes meet before the config is composed).
    peer_timeout_s: int = setting(PEER_TIMEOUT_S, rule=int_at_least(1), resume="may_change")
    # Resume a checkpoint saved by another number of processes (sharded checkpoints are re-sharded):
    # the data order then differs from the interrupted run's.
    resume_reshard: bool = setting(False, rule=BOOLEAN, resume="may_change")
    # Trackers the run logs to, besides TensorBoard's event files (always written: runner's own record).
    logger: list[str] = setting(["tensorboard"], rule=LOGGER_LIST, resume="may_change")
    mlflow: MlflowConfig = setting(MlflowConfig)
    wandb: WandbConfig = setting(WandbConfig)


SETTINGS: dict[str, Setting] = declared_settings(RunConfig)
TOP_LEVEL_KEYS = frozenset(key.split(".")[0] for key in SETTINGS)


def resume_policy(key: str) -> str:
    """The policy of the most specific declared setting that covers ``key`` (``optimizer.betas`` falls
    under ``optimizer``)."""
    while key not in SETTINGS and "." in key:
        key = key.rpartition(".")[0]
    return SETTINGS[key].resume if key in SETTINGS else "same"
