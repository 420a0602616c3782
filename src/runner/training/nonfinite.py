"""The non-finite guard's bookkeeping: a step it skipped, counted, and the error that ends the run.

The guard reads no norm on a quiet step: on a GPU each read makes the host wait for the device.
:class:`DeferredGuard` keeps each step's norm on the device and reads them together, once, where the
loop reads anyway or something would keep the weights: at a log step, before a validation, before a
checkpoint is saved and at the end. With ``on_nonfinite=raise`` (without loss scaling) a non-finite
norm then stops the run there, naming the step it came from; the updates since were applied in memory
but nothing holding them was logged as a result, validated or saved. With ``on_nonfinite=skip`` (and
under loss scaling) the step itself skipped the update on the device (``update.py``); the read counts
the skipped steps (``train/skipped_steps``, as of the log step that shows it) and stops a run at
``max_nonfinite_in_a_row`` of them, naming the last. A step the model writes may also return a NaN or
Inf loss beside finite updates: kept and read the same way, it stops the run under ``raise`` (loss
scaling or not) and counts as a skipped step under ``skip``, though its updates, applied inside the
model's step, stay.
"""

import math
from dataclasses import dataclass, field

import torch

from runner.checkpoint.state import TrainState
from runner.config.errors import UserError
from runner.training.plan import LoopSettings
from runner.training.step import ReturnedLosses


class NonFiniteError(UserError):
    """Training produced a non-finite gradient; raised before anything holding it was saved."""


ADVICE_NONFINITE = (
    "lower the learning rate (optimizer.lr); then check the inputs and add gradient clipping (clip=1.0)"
)


def where_it_was(norm: float, step: int, epoch: int, micro_batch: int, what: str = "") -> str:
    what = what or f"non-finite gradient (total norm {norm})"
    return f"{what} at optimizer step {step} (epoch {epoch}, micro-batch {micro_batch} of the epoch)"


def returned_text(losses: ReturnedLosses, values: list[float]) -> str:
    """``non-finite loss returned by training_step (other nan)``: the returned losses that are not finite."""
    pairs = zip(losses.names, values, strict=True)
    said = ", ".join(f"{name} {value}" for name, value in pairs if not math.isfinite(value))
    return f"non-finite loss returned by training_step ({said})"


def last_loss_text(state: TrainState) -> str:
    if state.last_train_loss is None:
        return "no loss logged yet"
    return f"last logged loss {state.last_train_loss:.4g}"


@dataclass
class DeferredGuard:
    """Each unchecked step's norm, still on the device, with where it was taken. ``enabled=False``
    (``on_nonfinite=off``): nothing is kept. ``raises``: ``on_nonfinite=raise`` without loss scaling,
    the first non-finite norm ends the run; else each is a skipped step, counted."""

    enabled: bool = False
    raises: bool = True
    most_in_a_row: int = 5  # skipped steps in a row that end the run
    losses_raise: bool = True  # on_nonfinite=raise: a non-finite returned loss ends the run, scaled or not
    skips_on_device: bool = False  # the step itself skipped a non-finite update (update.py)
    norms: list[torch.Tensor] = field(default_factory=list)
    places: list[tuple[int, int, int]] = field(default_factory=list)  # (step, epoch, micro-batch)
    losses: list[ReturnedLosses | None] = field(default_factory=list)  # what a model's own step returned

    def keep(self, norm: torch.Tensor, state: TrainState, losses: ReturnedLosses | None = None) -> None:
        """Before the step is counted: ``state`` is at the step's start."""
        if self.enabled:
            self.norms.append(norm.detach())
            self.places.append((state.step + 1, state.epoch, state.batches_done_in_epoch))
            self.losses.append(losses)

    def all_finite(self) -> torch.Tensor | None:
        """One device tensor, to read with the log step's other values; None when nothing is kept."""
        if not self.norms:
            return None
        returned = [kept.values for kept in self.losses if kept is not None]
        return torch.isfinite(torch.cat([torch.stack(self.norms).float().flatten(), *returned])).all()

    def check(self, state: TrainState, finite: bool | None = None) -> None:
        """Count or raise for the non-finite norms kept (``finite``: ``all_finite()`` as read already),
        in their order; forget them all."""
        if not self.norms:
            return
        if finite is None:
            finite = bool(self.all_finite())
        norms = [] if finite else torch.stack(self.norms).float().tolist()
        places, losses = list(self.places), list(self.losses)
        self.norms.clear()
        self.places.clear()
        self.losses.clear()
        if finite:
            state.nonfinite_in_a_row = 0
            return
        for norm, place, returned in zip(norms, places, losses, strict=True):
            values = [] if returned is None else returned.values.tolist()
            if math.isfinite(norm) and all(map(math.isfinite, values)):
                state.nonfinite_in_a_row = 0
                continue
            # A non-finite gradient says itself; finite updates beside a non-finite returned loss, the loss.
            what = returned_text(returned, values) if returned is not None and math.isfinite(norm) else ""
            if self.losses_raise if what else self.raises:
                self.stop(state, norm, place, what)
            self.count_skipped(state, norm, place, what)

    def stop(self, state: TrainState, norm: float, place: tuple[int, int, int], what: str) -> None:
        step = place[0]
        applied = "; the update was not applied" if self.skips_on_device and not what else ""
        raise NonFiniteError(
            f"{where_it_was(norm, *place, what)}{applied}; {last_loss_text(state)}; the run stopped at step "
            f"{state.step}, before anything after step {step - 1} was saved. {ADVICE_NONFINITE}"
        )

    def count_skipped(self, state: TrainState, norm: float, place: tuple[int, int, int], what: str) -> None:
        """A step whose update was skipped; too many in a row end the run. Under loss scaling an
        overflow is routine (the scaler lowers its scale), and it counts like any other skip."""
        state.skipped_steps += 1
        state.nonfinite_in_a_row += 1
        if state.nonfinite_in_a_row >= self.most_in_a_row:
            raise NonFiniteError(
                f"{where_it_was(norm, *place, what)}: {state.nonfinite_in_a_row} steps in a row skipped; "
                f"{last_loss_text(state)}. {ADVICE_NONFINITE}"
            )


def guard_for(settings: LoopSettings, scaled: bool, skips_on_device: bool = False) -> DeferredGuard:
    """The guard ``settings.on_nonfinite`` asks for (``scaled``: under loss scaling; ``skips_on_device``:
    the step itself skips a non-finite update)."""
    return DeferredGuard(
        enabled=settings.on_nonfinite != "off",
        raises=settings.on_nonfinite == "raise" and not scaled,
        most_in_a_row=settings.max_nonfinite_in_a_row,
        losses_raise=settings.on_nonfinite == "raise",
        skips_on_device=skips_on_device,
    )
