"""Checkpoint files: written durably, loaded safely, found in a run's folder.

A checkpoint is a plain dict that ``torch.load(path, weights_only=True)`` reads with nothing else
(see ``contents.py`` for what is in one). Nothing in it is a numpy object or a pickled class.
"""

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from runner.config.errors import UserError

CHECKPOINT_DIR = "checkpoints"
FORMAT_VERSION = 1


class CheckpointError(UserError):
    """A checkpoint that cannot be used; the message names the file and what to do."""


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
    """Strict loading, with the debugging checklist's advice: name missing keys, unexpected keys and shape
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
