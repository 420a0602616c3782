"""FSDP2 (``strategy=fsdp``) and activation checkpointing: which blocks of a model are sharded and
recomputed one by one, and how.

A model that does not fit one GPU is usually a stack of identical blocks (a transformer's layers).
Each block becomes a unit of its own: its parameters are gathered just before its forward (and
backward) and freed after, so a process holds one block's whole weights at a time, not the model's.
"""

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from runner.config.errors import ConfigError


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The layers of every ``ModuleList`` (or ``Sequential``) whose children are two or more modules of
    one class: a transformer's blocks. The outermost such lists only; [] when the model has none."""
    found: list[nn.Module] = []
    taken: set[int] = set()
    for module in model.modules():
        if id(module) in taken or not isinstance(module, nn.ModuleList | nn.Sequential):
            continue
        children = list(module.children())
        classes = {type(child) for child in children}
        if len(children) >= 2 and len(classes) == 1 and any(True for _ in children[0].parameters()):
            found += children
            taken.update(id(inner) for child in children for inner in child.modules())
    return found


def blocks_of(model: nn.Module, class_names: list[str] | None) -> list[nn.Module]:
    """The modules named by class (``fsdp.wrap``), outermost only; by default the repeated blocks."""
    if class_names is None:
        return repeated_blocks(model)
    wanted = set(class_names)
    found, taken = [], set()
    for module in model.modules():
        if id(module) not in taken and type(module).__name__ in wanted and module is not model:
            found.append(module)
            taken.update(id(inner) for inner in module.modules())
    missing = wanted - {type(module).__name__ for module in found}
    if missing:
        present = Counter(type(module).__name__ for module in model.modules() if module is not model)
        listed = ", ".join(f"{name} ({count})" for name, count in present.most_common(12))
        raise ConfigError(
            f"fsdp.wrap={sorted(class_names)}: the model has no module of class "
            f"{', '.join(sorted(missing))}; its module classes (how many): {listed}"
        )
    return found


def checkpoint_activations(blocks: list[nn.Module]) -> None:
    """Each block's forward runs under torch's non-reentrant activation checkpoint: its activations are
    recomputed in backward, with the random state of the first pass (dropout draws alike). The
    blocks keep their classes and names, so state dict keys do not change."""
    for block in blocks:
        forward = block.forward

        def recomputed(*args, _forward=forward, **kwargs):
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        block.forward = recomputed


def mixed_precision(precision_used: str) -> MixedPrecisionPolicy:
    """``precision=bf16``: blocks compute in bf16 (parameters gathered in bf16) while the sharded
    weights, the optimizer and the gradient reduction stay in fp32."""
    if precision_used == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard(model: nn.Module, blocks: list[nn.Module], precision_used: str) -> nn.Module:
    """``fully_shard`` each block, then the root (what is left: embeddings, head). In place."""
    policy = mixed_precision(precision_used)
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


@contextmanager
def no_gradient_sync(model: nn.Module) -> Iterator[None]:
    """Inside an accumulation window: gradients stay unreduced until the window's last micro-batch."""
    assert isinstance(model, FSDPModule)
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
