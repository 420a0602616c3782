"""Precision policy: autocast and loss scaling, or no-op stand-ins when running in fp32."""

import functools
import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


@dataclass
class Precision:
    requested: str
    used: str
    device_type: str
    # Loss scaling for fp16; disabled (every method a pass-through) otherwise.
    scaler: torch.amp.GradScaler
    fallback_reason: str | None = None

    def autocast(self) -> AbstractContextManager:
        if self.used == "amp":
            return torch.autocast(self.device_type, dtype=torch.float16)
        if self.used == "bf16":
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return nullcontext()


@functools.cache
def _cpu_autocasts_bf16() -> bool:
    """Whether bf16 autocast works on this CPU, tried once on a tiny matmul: torch has no public
    query for it, and a build or CPU without it raises or leaves the result in fp32."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            product = torch.ones(2, 2) @ torch.ones(2, 2)
    except (RuntimeError, TypeError):
        return False
    return product.dtype == torch.bfloat16


def bf16_supported(device: torch.device) -> bool:
    """Whether ``precision=bf16`` runs with bf16 autocast on this device (rather than falling back),
    asked of torch at run time: so a fallback suggests bf16 only where it would work."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return _cpu_autocasts_bf16()
    return False


def _unsupported_reason(requested: str, device: torch.device) -> str | None:
    if requested == "amp" and device.type != "cuda":
        return f"fp16 autocast with loss scaling needs CUDA, and this run is on {device.type}"
    if requested == "bf16" and not bf16_supported(device):
        if device.type == "cuda":
            return "this CUDA device has no bf16 support"
        if device.type == "cpu":
            return "bf16 autocast does not work on this CPU"
        return f"bf16 autocast is not supported on {device.type}"
    return None


def resolve_precision(requested: str, device: torch.device, suggest: bool = True) -> Precision:
    """The precision actually used; an unsupported request falls back to fp32 with one warning,
    which names ``precision=bf16`` when that would run here instead (``suggest=False`` where the user
    cannot choose the precision, as in ``eval``)."""
    reason = _unsupported_reason(requested, device)
    used = "fp32" if reason else requested
    if reason:
        hint = ""
        if suggest and requested != "bf16" and bf16_supported(device):
            hint = f"; precision=bf16 gives mixed precision here (bf16 autocast works on this {device.type})"
        log.warning("precision=%s is not available (%s); this run uses fp32%s", requested, reason, hint)
    scaler = torch.amp.GradScaler(device.type, enabled=used == "amp")
    return Precision(requested, used, device.type, scaler, reason)
