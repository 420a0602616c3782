"""Where a run stands: everything needed to continue it besides the weights, optimizer, schedule and
loss scale, which have state dicts of their own."""

from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Any, get_args, get_origin


def saved_as(name: str) -> dict[str, Any]:
    return {"saved_as": name}


TRANSIENT = {"saved_as": None}  # not saved: belongs to this process only
OPTIONAL = {"optional": True}  # saved, but a checkpoint from before it existed still loads (as the default)


@dataclass
class TrainState:
    step: int = field(default=0, metadata=saved_as("global_step"))  # optimizer steps taken
    epoch: int = 0  # epochs completed
    batches_done_in_epoch: int = 0
    best_val: float | None = None  # best value of the monitored metric
    best_val_step: int | None = None
    last_train_loss: float | None = None
    last_train_loss_step: int | None = field(default=None, metadata=TRANSIENT)  # the step it was logged at
    last_val: dict[str, float] = field(default_factory=dict)
    skipped_steps: int = 0  # optimizer steps skipped for non-finite gradients
    stopped_by_signal: int | None = field(default=None, metadata=TRANSIENT)
    stop_reason: str | None = field(default=None, metadata=TRANSIENT)  # a callback ended the run early
    nonfinite_in_a_row: int = field(default=0, metadata=TRANSIENT)
    # The micro-batch an out-of-memory split left the run at (training/oom.py); None: data.batch_size.
    micro_batch_size: int | None = field(default=None, metadata=OPTIONAL)

    def state_dict(self) -> dict[str, Any]:
        """Under the checkpoint's key names (``global_step``, ``epoch``, ``best_val``, ...)."""
        return {
            item.metadata.get("saved_as", item.name): _copy(getattr(self, item.name))
            for item in fields(self)
            if item.metadata.get("saved_as", item.name) is not None
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Every key is there: ``load_checkpoint`` refuses a file that lacks one (:func:`saved_keys`)."""
        for item in fields(self):
            key = item.metadata.get("saved_as", item.name)
            if item.metadata.get("optional"):
                setattr(self, item.name, _optional(state_dict.get(key), item.default))
            elif key is not None:
                setattr(self, item.name, _copy(state_dict[key]))


def saved_keys() -> tuple[str, ...]:
    """The checkpoint keys a :class:`TrainState` is saved under (and a file must hold)."""
    optional = {item.name for item in fields(TrainState) if item.metadata.get("optional")}
    return tuple(key for key in TrainState().state_dict() if key not in optional)


def saved_kinds() -> dict[str, tuple[type, ...]]:
    """The types each key a :class:`TrainState` is saved under may hold (a float may be saved as an int)."""
    kinds = {}
    for item in fields(TrainState):
        key = item.metadata.get("saved_as", item.name)
        if key is None or item.metadata.get("optional"):
            continue
        parts = get_args(item.type) if isinstance(item.type, UnionType) else (item.type,)
        found = tuple(get_origin(part) or part for part in parts)
        kinds[key] = (*found, int) if float in found else found
    return kinds


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def _optional(value: Any, default: Any) -> Any:
    """An optional key holds a positive whole number or nothing; anything else (a forged file's) reads
    as its default."""
    return value if type(value) is int and value > 0 else default
