"""Speed settings that matter on GPUs and are safe everywhere: each one either applies or says in
the run plan why it does not."""

from dataclasses import dataclass, field

import torch
from torch import nn

from runner.training.compiling import EAGER_STEPS, CompileOptions, DelayedCompile, compile_options

__all__ = ["SpeedPlan", "apply_speed_settings", "compile_options"]


@dataclass
class SpeedPlan:
    forward_model: nn.Module  # what the loop calls; checkpoints always save the plain module
    channels_last: bool  # convert image batches to channels-last memory format
    notes: list[str]
    compile: DelayedCompile | None = field(default=None)  # called at each step boundary (compiling.py)


def has_conv(model: nn.Module) -> bool:
    return any(isinstance(module, nn.Conv2d | nn.Conv3d) for module in model.modules())


def apply_speed_settings(
    model: nn.Module,
    device: torch.device,
    tf32: bool,
    channels_last: bool,
    compile_model: CompileOptions | bool | None,
) -> SpeedPlan:
    # What applies on this device, and what was asked for but cannot apply: not CUDA-only settings
    # that are off on a CPU, as they are by default.
    notes = []
    if device.type == "cuda":
        notes.append("pinned memory, non-blocking copies")
    if tf32 and device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        notes.append("tf32 matmuls")
    elif tf32 and device.type == "cuda":
        notes.append("tf32: needs a GPU of compute capability 8.0 or newer, off on this one")

    use_channels_last = channels_last and has_conv(model)
    if use_channels_last:
        model.to(memory_format=torch.channels_last)
        notes.append("channels_last")
    elif channels_last:
        notes.append("channels_last: the model has no conv layers, off")

    if isinstance(compile_model, bool):  # the plain switch: the whole model, with torch's defaults
        compile_model = CompileOptions("default", None, False, False) if compile_model else None
    delayed = None
    if compile_model is not None:  # in place after a few eager steps: the loop calls the model itself
        delayed = DelayedCompile(model, compile_model)
        notes.append(
            f"{compile_model.described()} after {EAGER_STEPS} eager steps that time it; compile time "
            "and steady step time in the log"
        )
    return SpeedPlan(model, use_channels_last, notes, delayed)
