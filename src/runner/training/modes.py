"""Looking at a model in ``eval()`` and handing it back in the mode it was in, through the model's own
``train()``: a model that overrides ``train()`` (resets a state, keeps its batch norm frozen, switches
what its forward does) is told both ways, as a hand-written loop tells it."""

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
