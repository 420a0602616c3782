"""Looking at a model in ``eval()`` and handing it back in the mode it was in, through the model's own
``train()``: a model that overrides ``train()`` (resets a state, keeps its batch norm frozen, switches
what its forward does) is told both ways, as a hand-written loop tells it. Training starts with the
model's own ``train()``; a part the model's builder left in ``eval()`` (a frozen teacher) stays so, as
a hand loop that calls ``model.train(); model.teacher.eval()`` keeps it."""

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def evaluation_mode(model: nn.Module) -> Iterator[None]:
    """``model.eval()`` inside; after, every module in the mode it was in."""
    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield
    finally:
        restore_modes(modes)


def restore_modes(modes: dict[nn.Module, bool]) -> None:
    """``modes`` maps every module of a model, the model first (``model.modules()``'s order), to its
    mode. The model's own ``train(mode)`` runs first; then a part set apart by hand, without an
    override saying so (a submodule frozen by ``.eval()``), gets its mode back through its own
    ``train()``, parents before children."""
    modules = iter(modes.items())
    model, training = next(modules)
    model.train(training)
    for module, training in modules:
        if module.training != training:
            module.train(training)


def set_apart(model: nn.Module) -> dict[str, dict[nn.Module, bool]]:
    """The parts in ``eval()`` under a parent in ``train()``, by name, each with its own modules'
    modes: what a builder froze by hand. A model in ``eval()`` as a whole (transformers'
    ``from_pretrained`` returns one) sets nothing apart: it trains as ``model.train()`` has it."""
    parts: dict[str, dict[nn.Module, bool]] = {}
    if not model.training:
        return parts
    for name, module in model.named_modules():
        if module.training or any(name.startswith(f"{outer}.") for outer in parts):
            continue
        parts[name] = {inner: inner.training for inner in module.modules()}
    return parts


def start_training(model: nn.Module, parts: dict[str, dict[nn.Module, bool]]) -> None:
    """``model.train()`` (the model's own, through a DDP or compiled wrapper), then each part set
    apart at build time back in the modes it had."""
    model.train()
    for modes in parts.values():
        restore_modes(modes)


def kept_modes_line(parts: dict[str, dict[nn.Module, bool]]) -> str:
    """The run plan's words for the parts that stay in ``eval()`` while the rest trains."""
    names = ", ".join(parts)
    return (
        f"{names} in eval() as built, kept so in training (dropout off, batch norm statistics fixed); "
        "the rest in train()"
    )
