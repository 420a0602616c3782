"""How a run's model is spread over its processes (``strategy``: DDP or FSDP2) and which of its blocks
recompute their activations (``activation_checkpointing``), with what the run plan says about it."""

from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn

from runner.config.errors import ConfigError
from runner.config.schema import RunConfig
from runner.training.agreeing_step import agreeing_step
from runner.training.compiling import compile_options, compiled_now
from runner.training.distributed import ProcessInfo, broadcast_from_first
from runner.training.manual_step import writes_own_step
from runner.training.memory_agreement import Agreement
from runner.training.step import RUNNERS_STEP, Step


@dataclass
class Spread:
    forward_model: nn.Module  # what a step calls: the model, or its DDP / compiled wrapper
    skip_grad_sync: Callable[[], AbstractContextManager] = nullcontext  # inside an accumulation window
    notes: dict[str, str] = field(default_factory=dict)  # run plan rows: strategy, activation checkpointing
    # runner's step as the model is spread: with on_oom=split under DDP, the one that averages the
    # gradients after the window and agrees on out of memory (agreeing_step.py)
    step: Step = RUNNERS_STEP


def oom_policy(config: RunConfig, process: ProcessInfo) -> str:
    """``on_oom=auto`` (the default): ``split`` with one process, where surviving costs nothing per
    step; ``raise`` with several, so that DDP's reducer overlaps the all-reduce with the backward.
    Surviving there (``on_oom=split``) needs every process to agree after the backward, without that
    overlap (docs/long-runs.md), so it is asked for by name."""
    if config.on_oom != "auto":
        return config.on_oom
    return "raise" if process.distributed else "split"


def memory_agreement(config: RunConfig, process: ProcessInfo, model: nn.Module) -> Agreement:
    """Where the processes agree that one ran out of memory, so all split alike (``oom.py``): several
    processes under DDP. Not where a collective runs inside the forward, where one process cannot leave
    the others: FSDP's parameter gathers, a SyncBatchNorm's statistics. Nor for a step the model writes
    (it is not redone)."""
    ddp = config.strategy == "ddp" and not writes_own_step(model)
    communicates = any(isinstance(module, nn.SyncBatchNorm) for module in model.modules())
    split = oom_policy(config, process) == "split"
    return Agreement(process.rank, enabled=process.distributed and ddp and not communicates and split)


def described(blocks: list[nn.Module]) -> str:
    """``4 blocks (Block)``."""
    classes = Counter(type(block).__name__ for block in blocks)
    return f"{len(blocks)} blocks ({', '.join(classes)})"


def spread_model(
    config: RunConfig, model: nn.Module, forward_model: nn.Module, device: torch.device,
    precision_used: str, process: ProcessInfo,
) -> Spread:  # fmt: skip
    """Activation checkpointing first (it wraps the blocks' own forward), then the strategy: with
    ``fsdp`` each block is sharded, then the root, in place (the optimizer is built after, on the
    shards); with ``ddp`` and several processes the model is wrapped in DistributedDataParallel."""
    fsdp = config.strategy == "fsdp"
    notes = {}
    blocks: list[nn.Module] = []
    if fsdp or config.activation_checkpointing:  # FSDP2's modules are imported only here: 1 s of start-up
        from runner.training.sharding import blocks_of, checkpoint_activations, no_gradient_sync, shard

        blocks = blocks_of(model, config.fsdp.wrap)
    if config.activation_checkpointing:
        if not blocks:
            raise ConfigError(
                f"activation_checkpointing=true: {type(model).__name__} has no repeated blocks (the layers "
                "of a ModuleList of one class) to recompute; name the block class with fsdp.wrap=[Name]"
            )
        checkpoint_activations(blocks)
        notes["recomputed"] = f"{described(blocks)}: activations recomputed in backward"
    if fsdp:
        units = f"{described(blocks)} sharded one by one, then the rest" if blocks else "the whole model"
        shard(model, blocks, precision_used)
        dtype = ", bf16 compute, fp32 weights and reduction" if precision_used == "bf16" else ""
        notes["strategy"] = f"fsdp (FSDP2): {units}, over {process.world_size} process(es){dtype}"
        compiled = compiled_now(model, compile_options(config))
        return Spread(compiled, lambda: no_gradient_sync(model), notes)
    if process.distributed and writes_own_step(model):  # manual_step.py averages each optimizer's gradients
        broadcast_from_first([*model.parameters(), *model.buffers()])  # rank 0's start, as DDP's
        notes["strategy"] = (
            f"ddp: a whole copy of the model on each of {process.world_size} processes; each optimizer's "
            "gradients averaged at its update"
        )
        return Spread(forward_model, nullcontext, notes)
    if (memory := memory_agreement(config, process, model)).enabled:
        # No collective inside a backward, where a process that ran out of memory could not tell the others:
        # the agreeing step averages the gradients after the window and hands rank 0's buffers over before
        # each window and validation, where DDP would in the first forward after a synchronised one (the
        # same values).
        broadcast_from_first([*model.parameters(), *model.buffers()])  # rank 0's start, as DDP's
        notes["strategy"] = (
            f"ddp: a whole copy of the model on each of {process.world_size} processes; gradients averaged "
            "after each window's backward (on_oom=split), not overlapped with it as DDP's reducer does "
            "(on_oom=auto keeps DDP's overlap; docs/performance.md)"
        )
        forward = compiled_now(forward_model, compile_options(config))
        return Spread(forward, notes=notes, step=agreeing_step(memory, model))
    if process.distributed:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        notes["strategy"] = (
            f"ddp: a whole copy of the model on each of {process.world_size} processes, gradients averaged "
            f"by DDP during the backward; out of memory stops the run (on_oom={oom_policy(config, process)}; "
            "on_oom=split survives it without the overlap: docs/long-runs.md)"
        )
        return Spread(compiled_now(ddp, compile_options(config)), ddp.no_sync, notes)
    return Spread(forward_model, nullcontext, notes)
