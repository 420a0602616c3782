"""Runner's own forwards outside training (the first-batch check, every validation, the final one)
leave every random state as they found it: torch's CPU generator and each CUDA or MPS one, Python's
``random`` and numpy's. A model that draws in eval mode (a VAE's ``randn_like``, noise injection), or
a loader that draws a seed, then trains exactly as a loop that never validates, at any cadence."""

import functools
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class RandomStates:
    """Every random state at one moment (a device generator's only where that device is in use)."""

    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None
    mps: torch.Tensor | None
    python: Any  # None: not kept (``random_states(host=False)``)
    numpy: Any

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        if self.mps is not None:
            torch.mps.set_rng_state(self.mps)
        if self.python is not None:
            random.setstate(self.python)
        if self.numpy is not None:
            sys.modules["numpy"].random.set_state(self.numpy)


def random_states(host: bool = True) -> RandomStates:
    """Cheap: a few small tensors copied, no device generator touched unless CUDA or MPS is in use.
    ``host=False`` leaves out Python's and numpy's states, the costly ones (about 13 and 70 us against
    1.5 us for torch's CPU generator), for a caller that knows nothing draws from them."""
    numpy = sys.modules.get("numpy") if host else None  # only if something imported it
    return RandomStates(
        cpu=torch.get_rng_state(),
        cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        mps=torch.mps.get_rng_state() if mps_in_use() else None,
        python=random.getstate() if host else None,
        numpy=numpy.random.get_state() if numpy is not None else None,
    )


def host_states_changed(saved: RandomStates) -> bool:
    """Whether Python's or numpy's state moved since ``saved`` (which kept them): something drew."""
    if saved.python is not None and random.getstate() != saved.python:
        return True
    if saved.numpy is None:
        return "numpy" in sys.modules  # imported since: it may have drawn
    now = sys.modules["numpy"].random.get_state()
    return bool(now[0] != saved.numpy[0] or now[2:] != saved.numpy[2:] or (now[1] != saved.numpy[1]).any())


@contextmanager
def kept_random_state() -> Iterator[None]:
    """Everything drawn inside is drawn from copies: the states are put back after, however it ends."""
    saved = random_states()
    try:
        yield
    finally:
        saved.restore()


@functools.cache
def mps_in_use() -> bool:
    """Asked once: whether the machine has an MPS device does not change while the process runs."""
    return hasattr(torch, "mps") and torch.backends.mps.is_available()
