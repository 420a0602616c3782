"""Precision policy: autocast and loss scaling, or no-op stand-ins when running in fp32."""

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


def _unsupported_reason(requested: str, device: torch.device) -> str | None:
    if requested == "amp" and device.type != "cuda":
        return f"fp16 autocast with loss scaling needs CUDA, and this run is on {device.type}"
    if requested == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return "this CUDA device has no bf16 support"
        if device.type not in ("cuda", "cpu"):
            return f"bf16 autocast is not supported on {device.type}"
    return None


def resolve_precision(requested: str, device: torch.device) -> Precision:
    """The precision actually used; an unsupported request falls back to fp32 with one warning."""
    reason = _unsupported_reason(requested, device)
    used = "fp32" if reason else requested
    if reason:
        log.warning("precision=%s is not available (%s); this run uses fp32", requested, reason)
    scaler = torch.amp.GradScaler(device.type, enabled=used == "amp")
    return Precision(requested, used, device.type, scaler, reason)
