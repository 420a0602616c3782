"""The non-finite guard's bookkeeping: a step it skipped, counted, and the error that ends the run."""

import torch

from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.training.plan import LoopSettings


class NonFiniteError(UserError):
    """Training produced a non-finite gradient; raised before the optimizer applied it."""


ADVICE_NONFINITE = (
    "lower the learning rate (optimizer.lr); then check the inputs and add gradient clipping (clip=1.0)"
)


def count_skipped_step(
    state: TrainState, settings: LoopSettings, grad_norm: torch.Tensor, scaled: bool
) -> None:
    """A step the guard skipped: raise when asked to, or after too many skips in a row. Under loss
    scaling an overflow is routine (the scaler lowers its scale), and it counts like any other skip."""
    where = (
        f"non-finite gradient (total norm {grad_norm.item()}) at optimizer step {state.step + 1} "
        f"(epoch {state.epoch}, micro-batch {state.batches_done_in_epoch} of the epoch)"
    )
    last_loss = (
        f"last logged loss {state.last_train_loss:.4g}"
        if state.last_train_loss is not None
        else "no loss logged yet"
    )
    if settings.on_nonfinite == "raise" and not scaled:
        raise NonFiniteError(f"{where}; {last_loss}; the update was not applied. {ADVICE_NONFINITE}")
    state.skipped_steps += 1
    state.nonfinite_in_a_row += 1
    if state.nonfinite_in_a_row >= settings.max_nonfinite_in_a_row:
        raise NonFiniteError(
            f"{where}: {state.nonfinite_in_a_row} steps in a row skipped; {last_loss}. {ADVICE_NONFINITE}"
        )
