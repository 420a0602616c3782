"""A training step the model writes, for alternating updates (a GAN's discriminator, then its
generator): runner calls the model's ``training_step(batch, step)`` on each micro-batch and hands it
``step``, whose ``backward(loss, name)`` and ``update(name)`` do what :func:`train_step` does for one
optimizer, for each named one: loss scaling (one scaler; each optimizer unscaled before its clip),
clipping per optimizer, the non-finite guard, exact accumulation, gradients averaged over processes.

Accumulation (``accumulate=k``): the model's step runs on each of the window's k micro-batches in
turn; every ``backward`` adds its micro-batch's share of the window's gradient (its samples over the
window's, over every process) to the named optimizers' parameters only, and ``update(name)`` applies
that optimizer's update on the window's last micro-batch, where the step calls it (on the earlier ones
it does nothing). A window whose step called ``update(name)`` on an earlier micro-batch but not on the
last would apply nothing for that optimizer, and is refused. With ``accumulate=1`` this is the
hand-written loop's step exactly.
"""

import functools
import inspect
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.config.errors import UserError
from runner.training.batches import count_samples, to_device
from runner.training.distributed import average_gradients, broadcast_from_first
from runner.training.named_optimizers import NamedOptimizers
from runner.training.step import Learner, ReturnedLosses, Step, StepResult
from runner.training.update import clipped_norm, update
from runner.training.weighing import sample_shares, summed

OWN_STEP = "training_step"
SIGNATURE = f"{OWN_STEP}(batch, step)"
NO_GRADIENT = "a loss computed by the step (with a gradient): not detached, not made under torch.no_grad"


def writes_own_step(model: torch.nn.Module) -> bool:
    """Whether the model has a ``training_step``: then its optimizers are named (``NamedOptimizers``)
    and the learner trains with :data:`MODELS_STEP` (``experiment/optimizers.py``)."""
    return callable(getattr(model, OWN_STEP, None))


def check_signature(model: torch.nn.Module) -> None:
    """Before anything is written: runner calls ``training_step(batch, step)``. A step of another
    shape (one argument; Lightning's ``(batch, batch_idx)``, or ``(batch)`` on a module with Lightning's
    ``configure_optimizers``, which returns a loss for Lightning's trainer to step) is refused naming
    runner's."""
    try:
        parameters = list(inspect.signature(getattr(model, OWN_STEP)).parameters)
    except (TypeError, ValueError):  # no signature to read (a builtin): the call says
        return
    name = f"{type(model).__name__}.{OWN_STEP}({', '.join(parameters)})"
    lightning = (len(parameters) > 1 and parameters[1] == "batch_idx") or hasattr(
        model, "configure_optimizers"
    )
    if lightning and parameters[1:2] != ["step"]:
        raise UserError(
            f"{name} is a LightningModule's step, and runner's is not Lightning's: runner calls "
            f"{SIGNATURE}, where the step calls step.backward(loss) and step.update() itself; for a model "
            "whose step only returns its loss, drop training_step and use loss=from_model (see "
            "docs/coming-from.md, Lightning)"
        )
    try:
        inspect.signature(getattr(model, OWN_STEP)).bind(None, None)
    except TypeError:
        raise UserError(
            f"{name} cannot be called as runner calls it, {SIGNATURE}: it takes the batch and the step's "
            "handles (step.backward(loss, name), step.update(name)); see docs/own-model.md"
        ) from None


@dataclass
class Updates:
    """What the window's updates did, by optimizer name."""

    norms: dict[str, torch.Tensor] = field(default_factory=dict)
    clipped: dict[str, torch.Tensor] = field(default_factory=dict)
    applied: dict[str, bool | torch.Tensor] = field(default_factory=dict)  # a tensor: decided on the device


class StepHandles:
    """What a model's ``training_step(batch, step)`` is handed: ``backward`` and ``update`` by
    optimizer name, with runner's loss scaling, weights, clipping, guard and gradient averaging."""

    def __init__(
        self, learner: Learner, named: NamedOptimizers, check_finite: bool, updates: Updates
    ) -> None:
        self._learner, self._named, self._check_finite, self._updates = learner, named, check_finite, updates
        self.share = 1.0  # this micro-batch's weight in the window's gradient
        self.last_micro_batch = True  # updates apply only on the window's last micro-batch
        # The optimizers a backward reached and those updated in this window: an update with no
        # gradient, or a window with no update, trains nothing and is refused (it would end "ok").
        self.backed: set[str] = set()
        self.updated: dict[str, int] = {}  # the first micro-batch (from 1) each was updated on
        self.micro_batch = 1

    def backward(self, loss: torch.Tensor, *names: str) -> None:
        """Add this micro-batch's share of ``loss``'s gradient to the parameters of the optimizers
        named (every optimizer's when none is named), and to no others."""
        parameters = self._named.trainable(*names)
        self.backed.update(names or self._named.optimizers)
        weighted = loss if self.share == 1.0 else loss * self.share
        with torch.autocast(self._learner.device.type, enabled=False):  # backward outside autocast
            self._learner.precision.scaler.scale(weighted).backward(inputs=parameters)

    def update(self, name: str | None = None) -> None:
        """The optimizer ``name``'s update (each optimizer's in turn when none is named), with the
        gradients its parameters hold: averaged over the processes, unscaled, clipped at its own clip,
        checked, applied, then cleared."""
        if name is None:
            for each in self._named.optimizers:
                self.update(each)
            return
        optimizer = self._named.optimizer(name)
        if name not in self.backed:
            raise UserError(
                f"{OWN_STEP} called step.update({name!r}) with no step.backward(loss, {name!r}) before it in "
                f"this step, so the update would apply no gradient; call step.backward(loss, {name!r}) (or "
                "step.backward(loss) for every optimizer) before it"
            )
        self.updated.setdefault(name, self.micro_batch)
        if not self.last_micro_batch:
            return
        learner = self._learner
        parameters = self._named.trainable(name)
        if learner.processes > 1:
            average_gradients(parameters, learner.processes)
        clip = self._named.clips[name]
        done = update(optimizer, parameters, learner.precision.scaler, clip, self._check_finite)
        norm, applied = done.norm.detach(), done.applied
        updates = self._updates
        updates.norms[name] = norm
        updates.clipped[name] = clipped_norm(norm, clip)
        updates.applied[name] = applied & updates.applied.get(name, True)  # on the device: no read


def losses_of(returned: Any) -> dict[str, torch.Tensor]:
    """What the model's step returned: a scalar loss, or a mapping of named scalar losses, real and
    with a value (not on the meta device); one of them at least from the step's graph, or the run
    would log a number that is not the model's loss."""
    named = returned if isinstance(returned, Mapping) else {"loss": returned}
    allowed = "a scalar loss tensor or a dict of named scalar loss tensors (logged as train/<name>)"
    if not named:
        raise UserError(f"{OWN_STEP} must return {allowed}, not an empty {type(returned).__name__}")
    for name, value in named.items():
        if not (isinstance(value, torch.Tensor) and value.ndim == 0):
            what = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else (
                "None" if value is None else f"a {type(value).__name__}"
            )  # fmt: skip
            where = f" as {name!r}" if isinstance(returned, Mapping) else ""
            raise UserError(f"{OWN_STEP} returned {what}{where}; it must return {allowed}")
    for name, value in named.items():
        if value.is_complex() or value.is_meta:
            what = "a tensor on the meta device" if value.is_meta else f"a complex tensor ({value.dtype})"
            raise UserError(
                f"{OWN_STEP} returned {what} as {name!r}; it must return {allowed}, real numbers with "
                "values (float, on the model's device)"
            )
    if not any(value.requires_grad for value in named.values()):
        raise UserError(
            f"{OWN_STEP} returned {', '.join(map(repr, named))} with no gradient (requires_grad=False); it "
            f"must return {allowed}, among them {NO_GRADIENT}"
        )
    return {name: value.detach() for name, value in named.items()}


def check_updates_applied(model: torch.nn.Module, step: StepHandles, window: int, updates: Updates) -> None:
    """Each optimizer the window's step updated was updated on its last micro-batch, where updates
    apply: else its gradients were made and nothing applied them (the run would end "ok")."""
    missed = {name: first for name, first in step.updated.items() if name not in updates.norms}
    if missed:
        name, first = next(iter(missed.items()))
        raise UserError(
            f"{type(model).__name__}.{OWN_STEP} called step.update({name!r}) on micro-batch {first} of a "
            f"window of {window} (accumulate={window}) but not on its last, so that update never applies: "
            "with accumulate, an optimizer's update applies on the window's last micro-batch (a call on "
            "an earlier one does nothing); call step.update on every micro-batch, or count steps in "
            "optimizer steps, not training_step calls"
        )


def manual_train_step(
    learner: Learner,
    window: list,
    clip_norm: float | None,
    check_finite: bool = True,
    keep_last: bool = False,
) -> StepResult:
    """One window of the model's own step (see the module's docstring). ``clip_norm`` is not read:
    each optimizer clips at its own (``optimizers.<name>.clip``, the run's ``clip`` by default)."""
    named = learner.optimizer
    assert isinstance(named, NamedOptimizers)
    model, processes = learner.plain_model, learner.processes
    counts = [count_samples(batch, learner.target_key) for batch in window]
    weighed = len(window) > 1 or processes > 1
    shares = sample_shares(counts, processes)
    if processes > 1:
        broadcast_from_first(list(model.buffers()))  # rank 0's, as DDP does before a forward
    updates = Updates()
    step = StepHandles(learner, named, check_finite, updates)
    named.zero_grad(set_to_none=True)
    totals: dict[str, torch.Tensor] = {}
    batch = returned = None
    for index, batch in enumerate(window):
        batch = to_device(batch, learner.device, learner.channels_last)
        step.share, step.last_micro_batch = shares[index], index == len(window) - 1
        step.micro_batch = index + 1
        with learner.precision.autocast():
            returned = getattr(model, OWN_STEP)(batch, step)
        for name, value in losses_of(returned).items():
            weighted = value.float() * shares[index] / processes if weighed else value
            totals[name] = weighted if name not in totals else totals[name] + weighted
        if not keep_last:
            returned = None
    if not step.updated:
        touched_none = "" if step.backed else (
            f"; it called neither step.backward nor step.update: runner calls {SIGNATURE}, not Lightning's "
            "training_step(batch, batch_idx) (see docs/coming-from.md)"
        )  # fmt: skip
        raise UserError(
            f"{type(model).__name__}.{OWN_STEP} updated no optimizer in a step, so it trains nothing; call "
            "step.update(name) after step.backward(loss, name) for at least one of "
            + ", ".join(named.optimizers)
            + touched_none
        )
    check_updates_applied(model, step, len(window), updates)
    if processes > 1:  # the window's losses over every process's samples
        names = list(totals)
        means = summed(torch.stack([totals[name] for name in names]), processes)
        totals = dict(zip(names, means, strict=True))
    scaler = learner.precision.scaler
    if scaler.is_enabled() and updates.norms:
        scaler.update()
    named.zero_grad(set_to_none=True)  # what a backward left on parts no update cleared
    loss = totals["loss"] if "loss" in totals else sum(totals.values())
    result = result_of(learner, named, updates, loss, totals, sum(counts), batch, returned, keep_last)
    if check_finite:  # a NaN or Inf loss beside finite updates: the guard decides at its read, as for a norm
        values = torch.stack([value.float() for value in totals.values()])
        result.returned_losses = ReturnedLosses(tuple(totals), values)
    return result


MODELS_STEP = Step(manual_train_step, writes_own=True)


def all_of(applied: Iterable[bool | torch.Tensor]) -> bool | torch.Tensor:
    """Whether every update applied, without reading a verdict the device holds."""
    return functools.reduce(operator.and_, applied, True)


def combined(norms: Mapping[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """The norm over every part's gradients, from each part's norm (0 without an update)."""
    if not norms:
        return torch.zeros((), device=device)
    return torch.stack([norm.float() for norm in norms.values()]).square().sum().sqrt()


def result_of(
    learner: Learner, named: NamedOptimizers, updates: Updates, loss: torch.Tensor,
    totals: Mapping[str, torch.Tensor], samples: int, batch: Any, returned: Any, keep_last: bool,
) -> StepResult:  # fmt: skip
    """``train/grad_norm`` over every part; each part's norms and each named loss as scalars of their
    own (``train/grad_norm/<name>``, ``train/<loss name>``)."""
    scalars: dict[str, Any] = {f"train/{name}": value for name, value in totals.items() if name != "loss"}
    for name, norm in updates.norms.items():
        scalars[f"train/grad_norm/{name}"] = norm
        scalars[f"train/grad_norm_clipped/{name}"] = updates.clipped[name]
    scalars["train/grad_norm_clipped"] = combined(updates.clipped, learner.device)
    groups = named.param_groups
    return StepResult(
        loss, combined(updates.norms, learner.device), groups[0]["lr"], all_of(updates.applied.values()),
        samples, tuple(group["lr"] for group in groups), float(samples), batch if keep_last else None,
        returned if keep_last else None, scalars,
    )  # fmt: skip
