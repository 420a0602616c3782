"""A stream read by worker processes keeps its position: each worker reads a copy of the data set, so
the main process's copy never moves. torchdata's ``StatefulDataLoader`` (``pip install torchdata``, the
``streams`` extra) gathers each worker's ``state_dict()`` as of every batch it hands over, and starts the
workers of a resumed run from theirs: a resume reads on where the trained batches end, per worker,
instead of reading the pass again from its start."""

import copy
import logging
import warnings
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from runner.config.errors import UserError

log = logging.getLogger("runner")


def keeps_own_position(dataset: Any) -> bool:
    """A stream with ``state_dict()`` (and ``load_state_dict()``): runner saves it with the checkpoints."""
    return isinstance(dataset, IterableDataset) and hasattr(dataset, "state_dict")


def torchdata_installed() -> bool:
    try:
        import torchdata.stateful_dataloader  # noqa: F401
    except ImportError:
        return False
    return True


def stateful_loader(*args: Any, **kwargs: Any) -> DataLoader:
    """torchdata's loader, keeping each worker's state as of every batch it hands over."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    with warnings.catch_warnings():
        # torchdata 0.11 (its newest release) calls torch.set_vital, which torch 2.13 deprecates: a
        # warning about torchdata's code on every run, nothing a user can act on.
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
        return StatefulDataLoader(*args, snapshot_every_n_steps=1, **kwargs)


def training_loader_class(dataset: Any, num_workers: int) -> Callable[..., DataLoader]:
    """What builds the training loader: torchdata's for a stream that keeps its position, read by
    workers; torch's otherwise."""
    if num_workers > 0 and keeps_own_position(dataset):
        if torchdata_installed():
            return stateful_loader
        log.warning(
            "the training stream has state_dict(), but with data.num_workers=%d its position is kept only "
            "with torchdata installed (pip install torchdata): a resumed run reads its pass again from the "
            "start and skips the batches done",
            num_workers,
        )
    return DataLoader


class LoaderPosition:
    """The loader's state (each worker's copy of the stream, its ``state_dict()``) as of the batches
    trained (``read_ahead`` sets ``trained``); saved as ``stream_loader_state_dict`` with the number of
    workers it needs. A stream read in this process is ``loading.StreamPosition``."""

    name = "stream_loader"

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.trained: Any = None

    def state_dict(self) -> Any:
        return self.trained if self.trained is not None else self.after_pass()

    def read(self) -> Any:
        return {"num_workers": self.loader.num_workers, "loader": copy.deepcopy(self.loader.state_dict())}

    def after_pass(self) -> Any:
        """A new pass: the workers start from the main process's copy, at its start."""
        return {"num_workers": self.loader.num_workers, "loader": {}}

    def load_state_dict(self, state: Any) -> None:
        saved = state["num_workers"]
        if saved != self.loader.num_workers:
            raise UserError(
                f"data.num_workers={self.loader.num_workers}: the checkpoint's stream position is that of "
                f"{saved} loader workers, each reading its part of the stream; resume with "
                f"data.num_workers={saved}"
            )
        self.loader.load_state_dict(state["loader"])
