"""Device choice: the usual habit (cuda, else mps, else cpu), and no silent fallback when a
device is asked for explicitly. Numbers come back from the device in one read (:func:`to_floats`);
a count in host memory is read there (:func:`host_number`), one on a device stays there."""

from collections.abc import Mapping

import torch

from runner.config.errors import ConfigError


def resolve_device(requested: str) -> torch.device:
    """``auto`` picks the best available device; anything else must exist on this machine."""
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")

    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ConfigError(
            f"device={requested} is not a device; device must be auto, cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cuda":
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if available == 0:
            raise ConfigError(
                f"device={requested} is not available: this machine has no CUDA device; "
                "use device=auto or device=cpu"
            )
        if device.index is not None and device.index >= available:
            raise ConfigError(
                f"device={requested} is not available: this machine has {available} CUDA "
                f"device(s), cuda:0..cuda:{available - 1}"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            f"device={requested} is not available on this machine; use device=auto or device=cpu"
        )
    return device


def to_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Read every tensor with a single device-to-host copy (on the CPU, ``item()`` is the cheaper read)."""
    names = [name for name, value in values.items() if isinstance(value, torch.Tensor)]
    if all(values[name].device.type == "cpu" for name in names):
        read = [values[name].item() for name in names]
    else:
        read = torch.stack([values[name].detach().float() for name in names]).tolist()
    floats = dict(zip(names, read, strict=True))
    return {name: floats.get(name, value) for name, value in values.items()}


def host_number(value: torch.Tensor) -> int | float | torch.Tensor:
    """A 0-d tensor in host memory as a Python number, read through numpy's view of that memory (no
    copy, no wait for any device, no torch operator); a tensor on a device is returned as it is: a
    read there would make the host wait for the device (it waits for the next log step)."""
    if value.device.type != "cpu":
        return value
    try:
        return value.detach().numpy().item()
    except TypeError:  # a dtype numpy lacks (bfloat16): a host read all the same
        return value.item()
