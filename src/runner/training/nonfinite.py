"""The non-finite guard's bookkeeping: a step it skipped, counted, and the error that ends the run.

With ``on_nonfinite=raise`` (the default, without loss scaling) the guard does not read a norm on every
step: on a GPU each read makes the host wait for the device. :class:`DeferredGuard` keeps each step's
norm on the device and reads them together, once, where the loop reads anyway or something would
keep the weights: at a log step, before a validation, before a checkpoint is saved and at the end. A
non-finite norm then stops the run there, naming the step it came from; the updates since were applied
in memory but nothing holding them was logged as a result, validated or saved. ``on_nonfinite=skip``
and loss scaling read every step's norm, since they must decide that step's update.
"""

import math
from dataclasses import dataclass, field

import torch

from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.training.plan import LoopSettings


class NonFiniteError(UserError):
    """Training produced a non-finite gradient; raised before anything holding it was saved."""


ADVICE_NONFINITE = (
    "lower the learning rate (optimizer.lr); then check the inputs and add gradient clipping (clip=1.0)"
)


def where_it_was(norm: float, step: int, epoch: int, micro_batch: int, what: str = "") -> str:
    """``what``: the non-finite value when it is not the gradient's norm."""
    return (
        f"{what or f'non-finite gradient (total norm {norm})'} at optimizer step {step} "
        f"(epoch {epoch}, micro-batch {micro_batch} of the epoch)"
    )


def last_loss_text(state: TrainState) -> str:
    if state.last_train_loss is None:
        return "no loss logged yet"
    return f"last logged loss {state.last_train_loss:.4g}"


@dataclass
class DeferredGuard:
    """Each unchecked step's norm, still on the device, with where it was taken (``on_nonfinite=raise``
    without loss scaling). ``enabled=False``: the step checks itself (``train_step``), nothing is kept."""

    enabled: bool = False
    norms: list[torch.Tensor] = field(default_factory=list)
    places: list[tuple[int, int, int]] = field(default_factory=list)  # (step, epoch, micro-batch)

    def keep(self, norm: torch.Tensor, state: TrainState) -> None:
        """Before the step is counted: ``state`` is at the step's start."""
        if self.enabled:
            self.norms.append(norm.detach())
            self.places.append((state.step + 1, state.epoch, state.batches_done_in_epoch))

    def all_finite(self) -> torch.Tensor | None:
        """One device tensor, to read with the log step's other values; None when nothing is kept."""
        if not self.norms:
            return None
        return torch.isfinite(torch.stack(self.norms)).all()

    def check(self, state: TrainState, finite: bool | None = None) -> None:
        """Raise for the first non-finite norm kept (``finite``: ``all_finite()`` as read already);
        forget them all when every one is finite."""
        if not self.norms:
            return
        if finite is None:
            finite = bool(self.all_finite())
        if finite:
            self.norms.clear()
            self.places.clear()
            return
        norms = torch.stack(self.norms).float().tolist()
        first = next(index for index, norm in enumerate(norms) if not math.isfinite(norm))
        step, epoch, micro_batch = self.places[first]
        raise NonFiniteError(
            f"{where_it_was(norms[first], step, epoch, micro_batch)}; {last_loss_text(state)}; the run "
            f"stopped at step {state.step}, before anything after step {step - 1} was saved. "
            f"{ADVICE_NONFINITE}"
        )


def count_skipped_step(
    state: TrainState, settings: LoopSettings, grad_norm: torch.Tensor, scaled: bool, nonfinite_loss: str = ""
) -> None:
    """A step the guard skipped: raise when asked to, or after too many skips in a row. Under loss
    scaling an overflow is routine (the scaler lowers its scale), and it counts like any other skip.
    ``nonfinite_loss``: a step the model writes returned a NaN or Inf loss beside finite updates (no
    overflow of the scaler's: ``raise`` raises); its updates, applied inside the step, stay."""
    what = f"non-finite loss returned by training_step ({nonfinite_loss})" if nonfinite_loss else ""
    where = where_it_was(grad_norm.item(), state.step + 1, state.epoch, state.batches_done_in_epoch, what)
    scaled = scaled and not nonfinite_loss
    last_loss = last_loss_text(state)
    if settings.on_nonfinite == "raise" and not scaled:
        done = "nothing after it was saved" if nonfinite_loss else "the update was not applied"
        raise NonFiniteError(f"{where}; {last_loss}; {done}. {ADVICE_NONFINITE}")
    state.skipped_steps += 1
    state.nonfinite_in_a_row += 1
    if state.nonfinite_in_a_row >= settings.max_nonfinite_in_a_row:
        raise NonFiniteError(
            f"{where}: {state.nonfinite_in_a_row} steps in a row skipped; {last_loss}. {ADVICE_NONFINITE}"
        )
