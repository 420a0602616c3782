"""Runner's own forwards outside training (the first-batch check, every validation, the final one)
leave every random state as they found it: torch's CPU generator and each CUDA or MPS one, Python's
``random`` and numpy's. A model that draws in eval mode (a VAE's ``randn_like``, noise injection), or
a loader that draws a seed, then trains exactly as a loop that never validates, at any cadence."""

import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def kept_random_state() -> Iterator[None]:
    """Everything drawn inside is drawn from copies: the states are put back after, however it ends.
    Cheap: a few small tensors copied, no device generator touched unless CUDA or MPS is in use."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    mps = torch.mps.get_rng_state() if mps_in_use() else None
    python = random.getstate()
    numpy = sys.modules.get("numpy")  # only if something imported it: nothing to keep otherwise
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        if mps is not None:
            torch.mps.set_rng_state(mps)
        random.setstate(python)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)


def mps_in_use() -> bool:
    return hasattr(torch, "mps") and torch.backends.mps.is_available()
