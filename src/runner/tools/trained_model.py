"""A trained model out of a run: built from the config stored in its checkpoint, under the same trust
rules as ``eval`` (the stored config is data: it builds only the ``_target_``s it is allowed), with the
checkpoint's weights (the averaged ones, if the run kept an average), in ``eval()`` mode."""

from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

import torch

from runner.checkpoint.files import is_sharded_folder, load_checkpoint
from runner.checkpoint.locate import checkpoint_to_evaluate
from runner.checkpoint.trainable import load_weights
from runner.config.errors import ConfigError
from runner.config.trust import check_config_from_file, check_saved_resolved
from runner.config.typed import as_dict, typed_config
from runner.experiment.setup import Build, build_model_as_run
from runner.training.device import resolve_device

# How a target the stored config names is allowed, in the caller's own words ({targets}: comma-separated).
ALLOW = 'allow them with load_model(..., allow_targets="{targets}")'


def load_trained_model(
    path: Path, build: Build, trusted: Set[str], device_name: str = "cpu", allow: str = ALLOW
) -> torch.nn.Module:
    """``path``: a run directory (its ``best.pt``; without one, its newest checkpoint), a checkpoint
    file, or a sharded checkpoint's folder. ``allow``: how to allow a target, in the caller's words."""
    if not path.exists():
        raise ConfigError(f"{path}: no such run directory or checkpoint")
    path = checkpoint_to_evaluate(path)
    checkpoint = load_checkpoint(path)
    if is_sharded_folder(path):
        from runner.checkpoint.sharded import consolidated

        checkpoint = consolidated(path, checkpoint)
    stored = checkpoint.get("config")
    if not isinstance(stored, Mapping):
        raise ConfigError(f"checkpoint {path} holds no run config; the model is built from it")
    check_saved_resolved(stored, f"checkpoint {path}")
    config = typed_config(stored)
    check_config_from_file({"model": as_dict(config)["model"]}, trusted, f"checkpoint {path}", allow)
    model = build_model_as_run(build, config, checkpoint["seed"])  # a random base it froze: as trained
    weights: Any = checkpoint.get("averaged_model_state_dict") or checkpoint["model_state_dict"]
    load_weights(model, weights, checkpoint, path)  # a trainable-only one's base checked (trainable.py)
    return model.to(resolve_device(device_name)).eval()
