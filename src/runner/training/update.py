"""The end of a window, as a hand-written loop ends its step after the backward: unscale (loss
scaling), clip, the non-finite guard, the optimizer's step, zero-grad. The one update both step
shapes make: ``train_step``'s one optimizer, and each optimizer a model's own step names
(``manual_step.py``), so they clip, guard and step alike."""

from dataclasses import dataclass
from typing import TypeVar

import torch

from runner.training.phases import phase

Norm = TypeVar("Norm", float, torch.Tensor)


@dataclass
class Update:
    """Tensors stay on the device: reading them is a host sync, left to the log steps."""

    norm: torch.Tensor  # the total gradient norm before clipping
    # False: a non-finite gradient, the update was skipped; a 0-d tensor on the device where it decided
    applied: bool | torch.Tensor


def update(
    optimizer: torch.optim.Optimizer,
    parameters: list[torch.Tensor],
    scaler: torch.amp.GradScaler,
    clip: float | None,
    check_finite: bool,
    rescale: float | torch.Tensor | None = None,
) -> Update:
    """Apply ``optimizer``'s update with the gradients ``parameters`` hold, then clear them. Clipping
    comes after the backward, and under loss scaling after unscaling; ``rescale`` (the items a model
    said, ``weighing.py``) multiplies the unscaled gradients before their norm. With ``check_finite`` a
    non-finite norm leaves the weights and optimizer as they are, decided on the device without a read
    (:func:`step_if_finite`; under loss scaling the scaler skips it, with torch's one read); the guard
    counts the skipped steps where the loop reads anyway (``nonfinite.py``)."""
    scaler.unscale_(optimizer)
    grads = [p.grad for p in parameters if p.grad is not None]
    if rescale is not None:
        if isinstance(rescale, torch.Tensor) and any(hasattr(grad, "full_tensor") for grad in grads):
            rescale = rescale.item()  # sharded gradients (DTensor) take a number, not a plain tensor
        for grad in grads:
            grad.mul_(rescale)
    # Over sharded gradients (strategy=fsdp) the global norm, the same on every process: clipping, the
    # logged norm and the non-finite guard then decide alike everywhere.
    norm = (
        global_norm(torch.nn.utils.get_total_norm(grads))
        if grads
        else torch.zeros((), device=parameters[0].device if parameters else None)
    )
    if clip is not None and grads:
        torch.nn.utils.clip_grads_with_norm_(parameters, clip, norm)
    applied = torch.isfinite(norm) if check_finite else True
    with phase("optimizer"):
        if isinstance(applied, torch.Tensor) and not scaler.is_enabled():
            step_if_finite(optimizer, parameters, applied)
        else:
            scaler.step(optimizer)  # under loss scaling it sees an overflow and skips the step
    optimizer.zero_grad(set_to_none=True)
    return Update(norm, applied)


def step_if_finite(
    optimizer: torch.optim.Optimizer, parameters: list[torch.Tensor], finite: torch.Tensor
) -> None:
    """``optimizer.step()``, kept only where ``finite`` (a 0-d tensor on the device): the weights and the
    optimizer's state tensors are copied before and selected back after, on the device, so the host
    never waits to learn whether the step was good. The cost is one copy of both while it steps. State
    the step creates (its first) goes back to zeros, as optimizers start; state kept on another device
    than ``finite`` (Adam's step count on the CPU while the weights are on a GPU) is left as stepped."""
    state = optimizer.state
    weights = [(weight, local(weight).clone()) for weight in parameters]
    had = {id(weight) for weight in parameters if weight in state}
    kept = [(tensor, local(tensor).clone()) for weight in parameters if weight in state
            for tensor in state[weight].values() if isinstance(tensor, torch.Tensor)]  # fmt: skip
    optimizer.step()
    for tensor, before in weights + kept:
        if before.device == finite.device:
            local(tensor).copy_(torch.where(finite, local(tensor), before))
    for weight in parameters:
        if id(weight) not in had and weight in state:
            for tensor in state[weight].values():
                if isinstance(tensor, torch.Tensor) and local(tensor).device == finite.device:
                    local(tensor).copy_(torch.where(finite, local(tensor), 0))


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's shard of a sharded tensor (strategy=fsdp's DTensor, known by ``to_local``), the
    tensor itself otherwise: detached, so that copying into it changes the tensor."""
    return (tensor.to_local() if hasattr(tensor, "to_local") else tensor).detach()


def global_norm(norm: torch.Tensor) -> torch.Tensor:
    """A norm over sharded gradients is a DTensor (known by its ``full_tensor``, so that runs without
    sharding need not import it): its full value is the global norm, a collective."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def clipped_norm(grad_norm: Norm, max_norm: float | None) -> Norm:
    """The total norm after ``clip_grads_with_norm_``: it scales every gradient by this same
    coefficient, so the norm follows from the norm before, without another pass over the gradients.
    A norm still on the device stays there (a clamp, not a comparison, so no host read); a float
    the log step read stays a float."""
    if max_norm is None:
        return grad_norm
    coefficient = max_norm / (grad_norm + 1e-6)
    if isinstance(coefficient, torch.Tensor):
        return grad_norm * coefficient.clamp(max=1.0)
    return grad_norm * min(coefficient, 1.0)
