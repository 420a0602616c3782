"""The checklist's later checks: gradients, the update and validation (overfitting one batch is in
``overfit_check.py``)."""

import math
from typing import Any

import torch
from torch import nn

from runner.tools.doctor.own_step import ADVICE_OWN_STEP, changed_per_optimizer, own_step_once
from runner.tools.doctor.probe import (
    ADVICE_BAD_DATA,
    ADVICE_FORWARD_NAN,
    ADVICE_LOSS_FIRST,
    ADVICE_NAN_LOSS,
    ADVICE_NAN_WEIGHTS,
    FAIL,
    PASS,
    SKIP,
    WARN,
    Finding,
    Probe,
    Setup,
    count_nonfinite,
    model_outputs,
    named_tensors,
    nonfinite_kind,
    nonfinite_parameters,
    nonfinite_text,
    same,
    value_text,
)
from runner.training.batches import Forward, forward, to_device
from runner.training.modes import evaluation_mode
from runner.training.named_optimizers import NamedOptimizers
from runner.training.validation import evaluate


def check_gradients(probe: Probe) -> Finding:
    """Leaves this batch's gradients on the parameters: the next check's step uses them."""
    model, loss, clip = probe.setup.model, probe.loss, probe.setup.clip
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        return Finding(
            WARN,
            "the model has no trainable parameters (every requires_grad is False)",
            "unfreeze the parameters you mean to train",
        )
    if loss is None or not loss.requires_grad:
        return Finding(SKIP, "no loss to backpropagate; see checks 2 and 4")
    model.zero_grad(set_to_none=True)
    loss.backward()
    missing = [n for n, p in trainable if p.grad is None]
    nonfinite = [n for n, p in trainable if p.grad is not None and not torch.isfinite(p.grad).all()]
    norms = sorted(((p.grad.norm().item(), n) for n, p in trainable if p.grad is not None), reverse=True)
    total = math.sqrt(sum(norm**2 for norm, _ in norms))
    largest = ", ".join(f"{n} {norm:.3g}" for norm, n in norms[:3])
    if missing:
        return Finding(
            FAIL,
            f"{len(missing)} trainable parameters get no gradient: " + ", ".join(missing[:6]),
            "remove unused layers, or find where the graph is cut "
            "(.detach(), .item(), .numpy(), torch.no_grad in forward)",
        )
    if nonfinite:
        kind = nonfinite_kind(*count_nonfinite(p.grad for n, p in trainable if n in nonfinite)[:2])
        found = f"the gradients are {kind} in " + ", ".join(nonfinite[:6])
        if not torch.isfinite(loss).all():
            return Finding(
                FAIL,
                found + f" (the loss is {value_text(loss.detach().float().mean().item())}: see check 4)",
                ADVICE_LOSS_FIRST,
            )
        return Finding(
            FAIL,
            found + " although the loss is finite",
            "find the operation whose gradient is not finite (torch.autograd.set_detect_anomaly(True) "
            "names it): sqrt or norm of 0 and pow with a fractional exponent are the usual ones",
        )
    found = f"total norm {total:.4g}; largest: {largest}"
    if (clip is not None and total > 10 * clip) or (clip is None and total > 1e3):
        probe.advised_lower_lr = True
    if clip is not None and total > 10 * clip:
        return Finding(
            WARN,
            found + f"; {total / clip:.0f}x the clip norm {clip:g}",
            "gradients this large are usually a too-high learning rate; clipping will hold them "
            "at clip, but lower optimizer.lr if the loss is unstable",
        )
    if clip is None and total > 1e3:
        return Finding(WARN, found + " with clipping off", "turn on clipping (clip=1.0), lower the lr")
    return Finding(PASS, found + (f"; clip={clip:g}" if clip else "; clipping off"))


def check_update(probe: Probe) -> Finding:
    """One step of the run's optimizer with check 5's gradients. A step that leaves the parameters, or
    the loss on the same batch, NaN or Inf fails. The step is undone either way: the later checks test
    the model (the overfit check starts from its loss, as a run does)."""
    model = probe.setup.model
    trainable = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    if not trainable:
        return Finding(
            FAIL,
            "nothing changed: every parameter is frozen (requires_grad=False)",
            "unfreeze the parameters you mean to train",
        )
    if probe.loss is None:
        return Finding(SKIP, "no gradients to apply; see checks 2 and 4")
    optimizer = probe.setup.optimizer_factory(model)
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    broken_before, _ = nonfinite_parameters(model)
    loss_before = eval_loss_kind(probe)
    refused = None
    if isinstance(optimizer, NamedOptimizers):  # the model's own step, as a run takes it
        refused = own_step_once(probe, optimizer)
    else:
        if probe.setup.clip is not None:  # as train's step clips before the update
            torch.nn.utils.clip_grad_norm_(
                [p for p in model.parameters() if p.grad is not None], probe.setup.clip
            )
        optimizer.step()
    changed = [n for n, p in model.named_parameters() if not same(before[n], p.detach())]
    not_optimized = [n for pid, n in trainable.items() if pid not in in_optimizer]
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
    rates = ", ".join(f"{lr:g}" for lr in lrs)
    blown_up = blow_up(probe, broken_before, loss_before, rates)
    with torch.no_grad():  # the later checks test the model, not this step's effect
        for name, parameter in model.named_parameters():
            parameter.copy_(before[name])
    if refused is not None:
        return Finding(FAIL, refused, ADVICE_OWN_STEP)
    if blown_up is not None:
        probe.advised_lower_lr = True
        return blown_up
    if not changed:
        reason = "optimizer.lr=0" if lrs == [0] else "no gradient reached the optimizer"
        return Finding(
            FAIL,
            f"no parameter changed ({reason})",
            "set a learning rate > 0; call zero_grad before backward, not between backward and step",
        )
    if not_optimized:
        return Finding(
            FAIL,
            f"{len(not_optimized)} trainable parameters are not in the optimizer: "
            + ", ".join(not_optimized[:6]),
            "build the optimizer over model.parameters()",
        )
    unchanged = [n for n in trainable.values() if n not in changed]
    found = f"{len(changed)} of {len(trainable)} trainable tensors changed (lr {rates})"
    found += changed_per_optimizer(optimizer, model, changed)  # several optimizers: each one's count
    if unchanged:
        return Finding(WARN, found + "; unchanged: " + ", ".join(unchanged[:6]))
    return Finding(PASS, found)


def blow_up(probe: Probe, broken_before: list[str], loss_before: str | None, rates: str) -> Finding | None:
    """Check 6's finding where the step left the parameters NaN or Inf, or made the loss on the same
    batch NaN or Inf where it was finite before the step; None otherwise."""
    model = probe.setup.model
    broken, kind = nonfinite_parameters(model)
    if broken:
        names = ", ".join(broken[:6])
        if broken_before:
            return Finding(
                FAIL,
                f"the parameters were {kind} before the step: {names}; see check 4",
                "rebuild the model, or load a checkpoint saved before the loss went NaN",
            )
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if any(not torch.isfinite(grad).all() for grad in grads):
            return Finding(
                FAIL,
                f"the parameters are {kind} after one optimizer step: {names} (the gradients were "
                "not finite: see check 5)",
                "fix the gradients first (check 5); then lower the learning rate if it persists",
            )
        return Finding(
            FAIL,
            f"the parameters are {kind} after one optimizer step with finite gradients (lr {rates} "
            f"too high?): {names}",
            "lower the learning rate (optimizer.lr)"
            + ("" if probe.setup.clip is not None else "; add gradient clipping (clip=1.0)"),
        )
    loss_kind = eval_loss_kind(probe) if loss_before == "" else None
    if not loss_kind:
        return None
    was = value_text(probe.loss.detach().float().mean().item())
    return Finding(
        FAIL,
        f"one optimizer step (lr {rates}) made the loss on the same batch {loss_kind} (it was {was}); "
        f"the largest parameter is now {largest_parameter(model):.3g}",
        "lower the learning rate (optimizer.lr): the step is far too large",
    )


def eval_loss_kind(probe: Probe) -> str | None:
    """``NaN``, ``Inf`` or ``""`` (finite): the loss on the first batch under eval() and without
    gradients (no statistics updated, no randomness); None where it cannot be had."""
    setup = probe.setup
    try:
        with evaluation_mode(setup.model), torch.no_grad():
            loss = forward(setup.model, probe.batch, setup.loss_fn, setup.target_key).loss
    except Exception:
        return None  # a model that cannot run in eval(): check 7 says why
    return nonfinite_kind(*count_nonfinite([loss.detach()])[:2])


def largest_parameter(model: nn.Module) -> float:
    return max((p.detach().abs().max().item() for p in model.parameters() if p.numel()), default=0.0)


def check_validation(probe: Probe) -> Finding:
    setup = probe.setup
    model = setup.model
    seen: list[tuple[str, bool, bool]] = []
    hooks = [
        module.register_forward_pre_hook(
            lambda m, args, n=n: seen.append((n, m.training, torch.is_grad_enabled()))
        )
        for n, module in model.named_modules()
    ]
    buffers_before = {n: b.detach().clone() for n, b in model.named_buffers()}
    try:
        batch = to_device(next(iter(setup.val_loader)), setup.device)
        # No metrics: this checks the model's mode and gradients during validation, not its scores.
        evaluate(model, [batch], setup.loss_fn, setup.device, setup.precision, False, {}, setup.target_key)
        first, second = (eval_forward(model, batch, setup) for _ in range(2))
    finally:
        for hook in hooks:
            hook.remove()
    in_train = sorted({n or "<model>" for n, training, _ in seen if training})
    with_grad = sorted({n or "<model>" for n, _, grad in seen if grad})
    moved = [n for n, b in model.named_buffers() if not same(buffers_before[n], b)]
    if in_train or with_grad:
        return Finding(
            FAIL,
            ("modules in train mode during validation: " + ", ".join(in_train[:6]))
            if in_train
            else "gradients tracked during validation in: " + ", ".join(with_grad[:6]),
            "validate under model.eval() and torch.no_grad(); do not call .train() in forward",
        )
    if moved:
        return Finding(
            FAIL,
            "buffers changed during validation: " + ", ".join(moved[:6]),
            "a module updates statistics in eval: check batch-norm and custom modules",
        )
    finding = nonfinite_in_eval(probe, batch, first)
    if finding is not None:
        return finding
    if not all(same(a, b) for a, b in zip(outputs_of(first), outputs_of(second), strict=True)):
        return Finding(
            FAIL,
            "two eval forwards of the same batch differ: dropout or other randomness "
            "is still active in eval()",
            "use nn.Dropout (which eval() turns off), not F.dropout(..., training=True)",
        )
    return Finding(PASS, "eval() on every module, no gradient tracking, same output twice")


def eval_forward(model: nn.Module, batch: Any, setup: Setup) -> Forward:
    """One evaluation of its own: a model that carries a state starts it afresh at ``eval()``."""
    with evaluation_mode(model), torch.no_grad():
        return forward(model, batch, setup.loss_fn, setup.target_key)


def nonfinite_in_eval(probe: Probe, batch: Any, result: Forward) -> Finding | None:
    """Check 7's finding where the eval forward's outputs or loss are NaN or Inf, named with where it
    starts: the weights, the validation batch, the forward or the loss; None where all is finite."""
    model = probe.setup.model
    outputs = nonfinite_text("the model's outputs in eval()", model_outputs(result.outputs))
    if outputs is None and torch.isfinite(result.loss).all():
        return None
    found = outputs or f"the validation loss is {value_text(result.loss.float().mean().item())}"
    broken, kind = nonfinite_parameters(model)
    if broken:
        return Finding(FAIL, f"{found}: the parameters are {kind} (see check 4)", ADVICE_NAN_WEIGHTS)
    inputs = nonfinite_text("the validation batch's tensors", [t for _, t in named_tensors(batch)])
    if inputs is not None:
        return Finding(FAIL, f"{found}: {inputs}", ADVICE_BAD_DATA)
    if outputs is None:
        return Finding(FAIL, found + " although the model's outputs are finite", ADVICE_NAN_LOSS)
    if probe.loss is not None and not torch.isfinite(probe.loss).all():
        return Finding(FAIL, found + " (as in train(): see check 4)", ADVICE_FORWARD_NAN)
    return Finding(
        FAIL,
        found + " (in train() the loss was finite)",
        "find what forward does differently in eval(): batch-norm running statistics, eval-only "
        "branches; then log or sqrt of values <= 0, 0/0, an exp that overflows",
    )


def outputs_of(result: Forward) -> list[torch.Tensor]:
    """Every tensor the model returned, and the loss."""
    return [result.loss, *(tensor for _, tensor in named_tensors(result.outputs))]
