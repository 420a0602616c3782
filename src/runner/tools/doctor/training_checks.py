"""The checklist's later checks: gradients, the update, validation, and overfitting one batch with
the run's own training step."""

import copy
import math

import torch

from runner.tools.doctor.probe import ADVICE_NAN, FAIL, PASS, SKIP, WARN, Finding, Probe, named_tensors
from runner.training.batches import Forward, forward, to_device
from runner.training.step import Learner, train_step
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
        return Finding(FAIL, "non-finite gradients in " + ", ".join(nonfinite[:6]), ADVICE_NAN)
    found = f"total norm {total:.4g}; largest: {largest}"
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
    optimizer.step()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    not_optimized = [n for pid, n in trainable.items() if pid not in in_optimizer]
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
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
    rates = ", ".join(f"{lr:g}" for lr in lrs)
    found = f"{len(changed)} of {len(trainable)} trainable tensors changed (lr {rates})"
    if unchanged:
        return Finding(WARN, found + "; unchanged: " + ", ".join(unchanged[:6]))
    return Finding(PASS, found)


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
        evaluate(model, [batch], setup.loss_fn, setup.device, setup.precision, target_key=setup.target_key)
        model.eval()
        with torch.no_grad():
            first, second = (forward(model, batch, setup.loss_fn, setup.target_key) for _ in range(2))
        model.train()
    finally:
        for hook in hooks:
            hook.remove()
    in_train = sorted({n or "<model>" for n, training, _ in seen if training})
    with_grad = sorted({n or "<model>" for n, _, grad in seen if grad})
    moved = [n for n, b in model.named_buffers() if not torch.equal(buffers_before[n], b)]
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
    if not all(torch.equal(a, b) for a, b in zip(outputs_of(first), outputs_of(second), strict=True)):
        return Finding(
            FAIL,
            "two eval forwards of the same batch differ: dropout or other randomness "
            "is still active in eval()",
            "use nn.Dropout (which eval() turns off), not F.dropout(..., training=True)",
        )
    return Finding(PASS, "eval() on every module, no gradient tracking, same output twice")


def outputs_of(result: Forward) -> list[torch.Tensor]:
    """Every tensor the model returned, and the loss."""
    return [result.loss, *(tensor for _, tensor in named_tensors(result.outputs))]


def check_overfit(probe: Probe, steps: int = 100) -> Finding:
    """The run's own training step (loss scaling and clipping as configured), on one batch."""
    setup = probe.setup
    if probe.loss is not None and not probe.loss.requires_grad:
        return Finding(SKIP, "the loss has no gradient; see checks 5 and 6")
    model = copy.deepcopy(setup.model)
    model.train()
    model.zero_grad(set_to_none=True)
    optimizer = setup.optimizer_factory(model)
    learner = Learner(
        model, setup.loss_fn, optimizer, setup.precision, setup.device, target_key=setup.target_key
    )
    window = [probe.batch]
    losses = [train_step(learner, window, setup.clip, check_finite=False).loss.item() for _ in range(steps)]
    first, last = losses[0], min(losses[-5:])
    found = f"loss {first:.4g} -> {last:.4g} in {steps} steps on one batch"
    if not math.isfinite(last):
        return Finding(FAIL, found, ADVICE_NAN)
    if last > 0.7 * first:
        return Finding(
            FAIL,
            found + " (it should fall clearly)",
            "raise the learning rate a little, check that targets match inputs",
        )
    return Finding(PASS, found)
