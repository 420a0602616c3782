"""``checkpoint.trainable_only``: a model with a frozen base (peft's LoRA, or runner's ``freeze``) is
saved as what trains (every parameter with ``requires_grad``, and the buffers), with the sha256 of
the frozen parameters' bytes it trained on. Resume, ``eval``, ``export`` and ``load_model`` rebuild the
base from the run's config under its seed, check it against that digest, and load the rest: a base that
changed since (a pretrained file replaced) is refused in one line instead of giving other weights silently."""

import hashlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runner.checkpoint.files import CheckpointError, check_state_dict_fits
from runner.config.errors import ConfigError

DIGEST_KEY = "frozen_weights_sha256"


def frozen_names(model: nn.Module) -> list[str]:
    """The state dict's keys of parameters that do not train, in the state dict's order (a tied
    parameter under each of its names)."""
    return [
        name
        for name, value in model.state_dict(keep_vars=True).items()
        if isinstance(value, nn.Parameter) and not value.requires_grad
    ]


def frozen_digest(model: nn.Module, names: Iterable[str] | None = None) -> str:
    """``sha256:<hex>`` over each frozen parameter's name, dtype, shape and bytes (``names``: those
    of the model's state dict a checkpoint left out), in the state dict's order."""
    hasher = hashlib.sha256()
    state = model.state_dict()
    chosen = set(frozen_names(model) if names is None else names)
    for name in (name for name in state if name in chosen):
        tensor = state[name].detach().to("cpu").contiguous()
        hasher.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return f"sha256:{hasher.hexdigest()}"


def check_base_rebuilds(model: nn.Module, rebuild: Callable[[], nn.Module], seed: int) -> None:
    """A checkpoint keeps only what trains, so ``eval``, ``export`` and ``load_model`` build the frozen base
    again under the run's seed: one whose weights differ from build to build (drawn from a generator of
    its own, or from the clock) could never be loaded. Built a second time here, before the run writes."""
    names = frozen_names(model)
    if names and frozen_digest(rebuild(), names) != frozen_digest(model, names):
        raise ConfigError(
            f"checkpoint.trainable_only=true, but the model's frozen base ({len(names)} parameters, such as "
            f"{names[0]}) builds other weights each time under the same seed (seed={seed}): its checkpoints, "
            "which keep only the trained weights, could never be loaded; seed the build (draw from torch's "
            "generator, which runner seeds before the model is built) or load pretrained weights for the "
            "base, or set checkpoint.trainable_only=false"
        )


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict less its frozen parameters."""
    frozen = set(frozen_names(model))
    return {name: value for name, value in model.state_dict().items() if name not in frozen}


def load_weights(
    model: nn.Module, weights: Mapping[str, Any], checkpoint: Mapping[str, Any], path: Path
) -> None:
    """``weights`` into ``model``, strictly: all of them, or with a trainable-only checkpoint's digest
    the trained ones, once the model's frozen parameters are checked to be those it trained on."""
    digest = checkpoint.get(DIGEST_KEY)
    if digest is None:
        check_state_dict_fits(model, dict(weights), path)
        model.load_state_dict(weights)
        return
    # What the checkpoint leaves out: the frozen parameters, however the model was frozen (peft as it
    # is built, runner's freeze as a run sets it up: eval and load_model build the model alone).
    left_out = {name for name in model.state_dict() if name not in weights}
    ours = frozen_digest(model, left_out)
    if ours != digest:
        count = len(left_out)
        raise CheckpointError(
            f"checkpoint {path} holds only the trained weights (checkpoint.trainable_only=true); the "
            f"frozen weights it trained on have {digest[:19]}..., the {count} it leaves out of the model "
            f"the run's config builds now have {ours[:19]}...: the base model changed since (rebuild it "
            "from the same pretrained weights, or train again)"
        )
    check_state_dict_fits(model, dict(weights), path, leave_out=left_out)
    model.load_state_dict(weights, strict=False)
