"""Checkpoint files: what goes in one, how it is written durably, and how it is loaded safely.

A checkpoint is a plain dict that ``torch.load(path, weights_only=True)`` reads with nothing else:
the seed's keys (``model_state_dict``, ``optimizer_state_dict``, ``epoch``, ``best_val``) plus what
an exact resume needs. Nothing in it is a numpy object or a pickled class.
"""

import os
import pickle
import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

import runner
from runner.checks import UserError
from runner.engine import TrainState

CHECKPOINT_DIR = "checkpoints"
FORMAT_VERSION = 1


class CheckpointError(UserError):
    """A checkpoint that cannot be used; the message names the file and what to do."""


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


def restore_rng_states(states: dict[str, Any]) -> None:
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


def versions() -> dict[str, str]:
    return {"runner": runner.__version__, "torch": str(torch.__version__), "format": str(FORMAT_VERSION)}


def atomic_save(payload: dict[str, Any], path: Path) -> None:
    """Write to a temporary file in the same folder, fsync it, rename it over ``path``, fsync the
    folder. A crash or a full disk at any instant leaves either the old file or the new one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


REQUIRED_KEYS = ("model_state_dict", "optimizer_state_dict", "epoch", "best_val", "global_step")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load with ``weights_only=True`` (never anything else): a file that carries pickled code is
    refused before any of it runs."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "Weights only load failed" in str(error):
            reason = str(error).split("\n\n")[-1].splitlines()[0] if "\n" in str(error) else str(error)
            raise CheckpointError(
                f"checkpoint {path} was refused: it holds pickled objects that are not plain data "
                f"and could run code when loaded ({reason.strip()}); runner loads only with "
                "weights_only=True. Do not load it unless you trust where it came from."
            ) from None
        raise CheckpointError(f"checkpoint {path} is corrupted ({error})") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({first_line})") from None
    lacking = [key for key in REQUIRED_KEYS if not isinstance(checkpoint, dict) or key not in checkpoint]
    if lacking:
        raise CheckpointError(f"checkpoint {path} is not a runner checkpoint (it lacks {', '.join(lacking)})")
    return checkpoint


def _listing(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_state_dict_fits(module: torch.nn.Module, state_dict: dict[str, torch.Tensor], path: Path) -> None:
    """Strict loading, with the seed's advice: name missing keys, unexpected keys and shape
    mismatches instead of a wall of text from ``load_state_dict``."""
    expected = module.state_dict()
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    mismatched = [
        f"{key} (checkpoint {list(state_dict[key].shape)}, model {list(expected[key].shape)})"
        for key in expected
        if key in state_dict and state_dict[key].shape != expected[key].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys: {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_listing(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches: {_listing(mismatched)}")
    if problems:
        raise CheckpointError(
            f"checkpoint {path} does not fit this model: "
            + "; ".join(problems)
            + ". Check the architecture and key names (compare state_dict().keys()); "
            "the model config must match the one the checkpoint was saved with"
        )


def checkpoint_files(folder: Path) -> list[Path]:
    """A run's checkpoint files, newest first."""
    if not folder.is_dir():
        return []
    files = [path for path in folder.glob("*.pt") if not path.name.startswith(".")]
    return sorted(files, key=lambda path: path.stat().st_mtime_ns, reverse=True)


def checkpoint_payload(
    state: TrainState,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    config: dict[str, Any],
    seed: int,
    label_mapping: list[str] | None,
    world_size: int = 1,
) -> dict[str, Any]:
    """Everything an exact resume needs. Saved only at optimizer-step boundaries, so the position
    inside the accumulation window is always 0."""
    return {
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "epoch": state.epoch,
        "best_val": state.best_val,
        "best_val_step": state.best_val_step,
        "monitor": config["checkpoint"]["monitor"],
        "scheduler_state_dict": scheduler.state_dict(),
        "scaler_state_dict": scaler.state_dict(),
        "global_step": state.step,
        "batches_done_in_epoch": state.batches_done_in_epoch,
        "micro_batches_done_in_window": 0,
        "last_train_loss": state.last_train_loss,
        "last_val": dict(state.last_val),
        "skipped_steps": state.skipped_steps,
        "seed": seed,
        "world_size": world_size,
        "rng_states": rng_states(),
        "config": config,
        "label_mapping": label_mapping,
        "versions": versions(),
    }


def restore_training(
    checkpoint: dict[str, Any],
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
) -> TrainState:
    """Load every state strictly and return where the run stood. Random states are restored
    separately, as the very last thing before training continues."""
    check_state_dict_fits(model, checkpoint["model_state_dict"], path)
    model.load_state_dict(checkpoint["model_state_dict"])
    try:
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    except (ValueError, KeyError) as error:
        raise CheckpointError(f"checkpoint {path}: the optimizer state does not fit ({error})") from None
    scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
    if checkpoint["scaler_state_dict"]:
        scaler.load_state_dict(checkpoint["scaler_state_dict"])
    return TrainState(
        step=checkpoint["global_step"],
        epoch=checkpoint["epoch"],
        batches_done_in_epoch=checkpoint["batches_done_in_epoch"],
        best_val=checkpoint["best_val"],
        best_val_step=checkpoint["best_val_step"],
        last_train_loss=checkpoint["last_train_loss"],
        last_val=dict(checkpoint["last_val"]),
        skipped_steps=checkpoint.get("skipped_steps", 0),
    )
