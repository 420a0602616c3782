"""What a checkpoint holds: the usual keys (``model_state_dict``, ``optimizer_state_dict``,
``epoch``, ``best_val``) plus everything an exact resume needs, and how it is put back."""

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import runner
from runner.checkpoint.files import FORMAT_VERSION, CheckpointError, check_state_dict_fits
from runner.checkpoint.trainable import DIGEST_KEY, frozen_digest, load_weights, trainable_state_dict


def rng_states() -> dict[str, Any]:
    """Every global random state, as plain lists and tensors (safe-loadable)."""
    numpy_name, numpy_keys, numpy_pos, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {
            "name": numpy_name,
            "keys": numpy_keys.tolist(),
            "pos": int(numpy_pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng_states(states: dict[str, Any], path: Path) -> None:
    """A state that is not one (a forged file's) is named with its checkpoint, not a traceback."""
    try:
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal), gauss))
        numpy = states["numpy"]
        np.random.set_state(
            (numpy["name"], np.array(numpy["keys"], dtype=np.uint32), numpy["pos"],
             numpy["has_gauss"], numpy["cached_gaussian"])
        )  # fmt: skip
        torch.set_rng_state(states["torch"])
        if states["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["cuda"])
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, RuntimeError) as error:
        reason = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        raise CheckpointError(
            f"checkpoint {path} is not a runner checkpoint: its random states are not ones runner saves "
            f"({reason}); use another checkpoint of the run"
        ) from None


def versions() -> dict[str, str]:
    return {"runner": runner.__version__, "torch": str(torch.__version__), "format": str(FORMAT_VERSION)}


LOADABLE_LEAVES = (torch.Tensor, torch.dtype, torch.device, torch.Size)
PLAIN = (bool, int, float, complex, str, bytes, type(None))


def check_loadable(value: Any, where: str) -> None:
    """A checkpoint is loaded with ``weights_only=True``: only tensors, plain numbers and strings, and
    lists, tuples and dicts of them. A state that holds anything else (a numpy number, a deque) is
    named when it is saved, not discovered when every checkpoint of the run is refused."""
    if type(value) in PLAIN or isinstance(value, LOADABLE_LEAVES):
        return
    if type(value) in (list, tuple):
        for index, item in enumerate(value):
            check_loadable(item, f"{where}[{index}]")
        return
    if isinstance(value, dict) and type(value).__module__ in ("builtins", "collections"):
        for key, item in value.items():
            check_loadable(key, f"{where} key {key!r}")
            check_loadable(item, f"{where}[{key!r}]")
        return
    raise CheckpointError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}; a checkpoint holds only tensors, "
        "numbers, strings, and lists, tuples and dicts of them (convert it: float(), list(), .tolist())"
    )


@dataclass
class Stateful:
    """The live objects whose state dicts a checkpoint holds, under the usual key names."""

    model: torch.nn.Module  # the plain module, never a DDP or compiled wrapper: its keys stay plain
    optimizer: torch.optim.Optimizer
    scheduler: Any  # an LRScheduler, or anything with state_dict/load_state_dict
    scaler: torch.amp.GradScaler
    # More objects with state_dict/load_state_dict, saved as <name>_state_dict: "callbacks", "dataset"
    # (a stream that keeps its own position).
    others: Mapping[str, Any] = field(default_factory=dict)
    # The weights eval should use when they are not the model's own (an EMA's averages), or None.
    averaged_weights: Callable[[], Mapping[str, torch.Tensor] | None] = lambda: None
    # checkpoint.trainable_only: the model's trained weights only, and the frozen ones' digest.
    trainable_only: bool = False
    digest: str | None = None  # of the frozen weights as built (they do not train): computed once

    def model_states(self) -> dict[str, Any]:
        if not self.trainable_only:
            return {"model_state_dict": self.model.state_dict()}
        if self.digest is None:
            self.digest = frozen_digest(self.model)
        return {"model_state_dict": trainable_state_dict(self.model), DIGEST_KEY: self.digest}

    def state_dicts(self) -> dict[str, Any]:
        states = {
            **self.model_states(),
            "optimizer_state_dict": self.optimizer.state_dict(),
            "scheduler_state_dict": self.scheduler.state_dict(),
            "scaler_state_dict": self.scaler.state_dict(),
            **{f"{name}_state_dict": item.state_dict() for name, item in self.others.items()},
        }
        for name in self.others:
            check_loadable(states[f"{name}_state_dict"], f"{name}_state_dict")
        if (averaged := self.averaged_weights()) is not None:
            states["averaged_model_state_dict"] = averaged
        return states

    def load_state_dicts(self, checkpoint: Mapping[str, Any], path: Path) -> None:
        """Strictly: a model or optimizer that does not fit is named, not half-loaded. A sharded
        checkpoint's record (``sharded.py``) has its shards read first, re-sharded as the model is."""
        if DIGEST_KEY in checkpoint:  # checkpoint.trainable_only: the frozen weights checked, the rest loaded
            load_weights(self.model, checkpoint["model_state_dict"], checkpoint, path)
            self.digest = checkpoint[DIGEST_KEY]
        else:
            # A sharded one's placeholders have shapes: checked before its shards are read.
            check_state_dict_fits(self.model, checkpoint["model_state_dict"], path)
            if path.is_dir():
                from runner.checkpoint.sharded import load_sharded  # torch.distributed.checkpoint: only here

                checkpoint = load_sharded(path, checkpoint, self.model)
            self.model.load_state_dict(checkpoint["model_state_dict"])
        if wrong := wrong_optimizer_state(self.optimizer, checkpoint["optimizer_state_dict"]):
            shown = ", ".join(f"optimizer_state_dict{where}" for where in wrong[:4])
            verb = "does" if len(wrong) == 1 else "do"
            raise CheckpointError(
                f"checkpoint {path} is not a runner checkpoint: {shown} {verb} not hold what torch's "
                "optimizer saves there; use another checkpoint of the run"
            )
        try:
            self.optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        except (ValueError, KeyError, TypeError, IndexError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise CheckpointError(f"checkpoint {path}: the optimizer state does not fit ({reason})") from None
        self.scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
        if checkpoint["scaler_state_dict"]:
            self.scaler.load_state_dict(checkpoint["scaler_state_dict"])
        for name, item in self.others.items():
            if f"{name}_state_dict" in checkpoint:
                item.load_state_dict(checkpoint[f"{name}_state_dict"])


def wrong_optimizer_state(optimizer: Any, state: Any) -> list[str]:
    """What in a torch optimizer's saved state is not of torch's form: ``state`` a dict of each parameter's
    slots, ``param_groups`` a list of dicts with their ``params``; a slot of torch's own optimizers a
    tensor (``step`` also a number, SGD's momentum None; LBFGS keeps others). A forged slot would fail at
    the first step, inside torch. Several named optimizers: each; an optimizer of another kind: nothing."""
    if hasattr(optimizer, "optimizers") and isinstance(state, dict) and "param_groups" not in state:
        return [
            f"[{name!r}]{wrong}" for name, one in optimizer.optimizers.items()
            for wrong in wrong_optimizer_state(one, state.get(name))
        ]  # fmt: skip
    if not isinstance(optimizer, torch.optim.Optimizer) or state is None:
        return []
    groups = state.get("param_groups") if isinstance(state, dict) else None
    slots = state.get("state") if isinstance(state, dict) else None
    if not (isinstance(slots, dict) and isinstance(groups, list)) or not all(
        isinstance(group, dict) and isinstance(group.get("params"), list) for group in groups
    ):
        return [" (no dicts of state and param_groups with params)"]
    own = type(optimizer).__module__.startswith("torch.optim") and not isinstance(
        optimizer, torch.optim.LBFGS
    )
    shapes = {  # each saved parameter's number, as the live optimizer's groups hold its parameter
        index: tuple(parameter.shape)
        for saved, group in zip(groups, optimizer.param_groups, strict=False)
        for index, parameter in zip(saved["params"], group["params"], strict=False)
    }
    wrong = [f"['state'][{index!r}] ({type(values).__name__})" for index, values in slots.items()
             if not isinstance(values, dict)]  # fmt: skip
    for index, values in slots.items():
        wrong += [f"['state'][{index!r}][{slot!r}] ({shown_slot(value)})"
                  for slot, value in (values.items() if own and isinstance(values, dict) else ())
                  if not is_slot(slot, value, shapes.get(index))]  # fmt: skip
    return wrong


def is_slot(name: str, value: Any, shape: tuple[int, ...] | None) -> bool:
    """A slot of torch's own optimizers: a number as a tensor, or a tensor of its parameter's shape (a
    size of 1 where Adafactor keeps a row or a column); ``step`` also a plain number, SGD's momentum None."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 or shape is None:
            return True
        return value.dim() == len(shape) and all(
            size in (full, 1) for size, full in zip(value.shape, shape, strict=True)
        )
    return (name == "momentum_buffer" and value is None) or (name == "step" and type(value) in (int, float))


def shown_slot(value: Any) -> str:
    return (
        f"a tensor of shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
    )


def checkpoint_payload(
    stateful: Stateful, train_state: Mapping[str, Any], run_record: Mapping[str, Any]
) -> dict[str, Any]:
    """Everything an exact resume needs: the objects' states, where the run stands
    (``TrainState.state_dict()``: ``global_step``, ``epoch``, ``best_val``, ...), the random states, and
    the run's record (config, seed, world size, label mapping). Saved only at optimizer-step
    boundaries, so the position inside the accumulation window is always 0."""
    return {
        **stateful.state_dicts(),
        **train_state,
        "micro_batches_done_in_window": 0,
        "rng_states": rng_states(),
        **run_record,
        "versions": versions(),
    }
