"""Carried state: what a model keeps from one batch to the next (an RNN's hidden state, read through a
long text in order: truncated backpropagation through time).

A model opts in with an attribute ``carried_state``: an object with ``state_dict()``,
``load_state_dict(state)`` and ``reset()``. runner resets it at the start of every epoch (as
pytorch/examples' word language model starts each epoch from a zero state), saves it in checkpoints
(``carried_state_dict``: tensors, numbers, strings and containers of them, loadable with
``weights_only=True``) and loads it on resume, so a stopped run continues with the state it had."""

from typing import Any, Protocol

from torch import nn

from runner.config.errors import UserError

PROTOCOL = ("state_dict", "load_state_dict", "reset")


class CarriedState(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def reset(self) -> None: ...


class NoCarriedState:
    """A model that carries nothing: resetting it does nothing."""

    def reset(self) -> None:
        pass


def carried_state_of(model: nn.Module, processes: int = 1) -> CarriedState | NoCarriedState:
    """The model's ``carried_state`` (None or absent: nothing carried); one that lacks part of the
    protocol, or one on several processes (each would carry its own, a checkpoint holds one), is
    named before the run starts."""
    carried = getattr(model, "carried_state", None)
    if carried is None:
        return NoCarriedState()
    if processes > 1:
        raise UserError(
            f"{type(model).__name__} carries a state from batch to batch (carried_state), and this run has "
            f"{processes} processes: a checkpoint holds one process's carried state; run it in one process "
            "(without torchrun), or turn the model's carried state off"
        )
    missing = [name for name in PROTOCOL if not callable(getattr(carried, name, None))]
    if missing:
        raise UserError(
            f"{type(model).__name__}.carried_state is a {type(carried).__name__} without "
            f"{', '.join(missing)}(); a carried state needs state_dict(), load_state_dict(state) and "
            "reset() (runner resets it each epoch and saves it in checkpoints)"
        )
    return carried
