"""Seeds for every random source a run touches."""

import os
import random
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch


def draw_seed() -> int:
    """A fresh seed for ``seed=null``; the run records it so the run can be repeated."""
    return secrets.randbelow(2**32)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed ``random``, numpy and torch (CPU and every CUDA device), as a hand-written loop's
    usual ``set_seed``.

    ``deterministic`` also asks torch for deterministic kernels, which some GPU ops lack (they
    then raise, naming the op) and which can be slower.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Every random source seeded as a run seeds it before it builds its model, and put back as it was
    after: ``eval``, ``export`` and ``load_model`` build a run's model as the run built it, so a randomly
    initialised base it froze has the weights it trained on."""
    from runner.training.random_state import kept_random_state

    with kept_random_state():
        seed_everything(seed)
        yield
