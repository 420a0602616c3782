"""The debugging checklist's checks, registered in the order to run them: the simple engineering
problems first. Each says what it found and, when something is wrong, what to do."""

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runner.training.precision import Precision
from runner.training.step import Learner, move_batch, train_step
from runner.training.validation import evaluate

PASS, WARN, FAIL, SKIP = "pass", "warn", "FAIL", "skip"

# The memory and stability symptom table, as advice.
ADVICE_NAN = "lower the learning rate; then check the inputs and add gradient clipping (clip=1.0)"
ELEMENTWISE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCELoss, nn.BCEWithLogitsLoss)
CLASS_INDEX_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


@dataclass
class Setup:
    """What ``train`` would build, without writing anything."""

    model: nn.Module
    optimizer_factory: Callable[[nn.Module], torch.optim.Optimizer]
    loss_fn: Callable
    train_loader: Any
    val_loader: Any
    device: torch.device
    precision: Precision
    clip: float | None


@dataclass
class Finding:
    status: str
    found: str
    advice: str = ""


@dataclass
class Probe:
    """What the checks share as they run: the first batch (on the device) and its loss."""

    setup: Setup
    batch: Any = None  # as the loader yields it
    inputs: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    loss: torch.Tensor | None = None


@dataclass(frozen=True)
class Check:
    number: int
    name: str
    run: Callable[[Probe], Finding]
    needs_batch: bool  # skipped when no batch could be loaded (check 1 failed)


CHECKS: list[Check] = []


def check(
    name: str, needs_batch: bool = True
) -> Callable[[Callable[[Probe], Finding]], Callable[[Probe], Finding]]:
    """Register a check; checks run in the order they are registered, numbered from 1."""

    def register(function: Callable[[Probe], Finding]) -> Callable[[Probe], Finding]:
        CHECKS.append(Check(len(CHECKS) + 1, name, function, needs_batch))
        return function

    return register


def describe(tensor: torch.Tensor) -> str:
    text = f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"
    if tensor.numel() and (tensor.is_floating_point() or not tensor.is_complex()):
        finite = tensor[torch.isfinite(tensor)] if tensor.is_floating_point() else tensor
        if finite.numel():
            text += f" in [{finite.min().item():.4g}, {finite.max().item():.4g}]"
    return text


@check("one batch loads", needs_batch=False)
def check_batch(probe: Probe) -> Finding:
    try:
        batch = next(iter(probe.setup.train_loader))
    except Exception as error:
        return Finding(
            FAIL,
            f"loading raised {type(error).__name__}: {error}",
            "check the data set's __getitem__ and the collate",
        )
    if not (isinstance(batch, list | tuple) and len(batch) == 2):
        return Finding(
            FAIL,
            f"a batch is a {type(batch).__name__}, not (inputs, targets)",
            "make the data set yield (input, target) pairs",
        )
    probe.batch = batch
    inputs, targets = batch
    probe.inputs, probe.targets = move_batch(inputs, targets, probe.setup.device, False)
    problems = []
    if len(targets) == 0 or inputs.numel() == 0:
        problems.append("the batch is empty")
    for label, tensor in (("inputs", inputs), ("targets", targets)):
        if tensor.is_floating_point():
            nan, inf = torch.isnan(tensor).sum().item(), torch.isinf(tensor).sum().item()
            if nan or inf:
                problems.append(f"{label} hold {nan} NaN and {inf} Inf values")
    found = f"inputs {describe(inputs)}; targets {describe(targets)}"
    if problems:
        return Finding(
            FAIL,
            "; ".join(problems) + f" ({found})",
            "fix the data: clean or drop the bad samples, check the preprocessing",
        )
    return Finding(PASS, found)


@check("shapes and dtypes fit model and loss")
def check_shapes(probe: Probe) -> Finding:
    model, loss_fn, inputs, targets = probe.setup.model, probe.setup.loss_fn, probe.inputs, probe.targets
    try:
        with torch.no_grad():
            outputs = model(inputs)
    except Exception as error:
        return Finding(
            FAIL,
            f"model(inputs {tuple(inputs.shape)}) raised {type(error).__name__}: "
            f"{str(error).splitlines()[0]}",
            "make the model's input size match the data (data.input_shape, the model's first layer)",
        )
    target_dtype = str(targets.dtype).removeprefix("torch.")
    shapes = f"prediction {tuple(outputs.shape)}, target {tuple(targets.shape)} {target_dtype}"
    if isinstance(loss_fn, ELEMENTWISE_LOSSES) and outputs.shape != targets.shape:
        try:
            broadcast = torch.broadcast_shapes(outputs.shape, targets.shape)
        except RuntimeError:
            broadcast = None
        if broadcast is not None:
            return Finding(
                FAIL,
                f"{shapes}: {type(loss_fn).__name__} silently broadcasts them to "
                f"{tuple(broadcast)} and averages every pair",
                "give prediction and target the same "
                "shape (e.g. targets of shape (N, 1), or squeeze the prediction)",
            )
    if isinstance(loss_fn, CLASS_INDEX_LOSSES) and outputs.ndim == 2 and targets.shape != outputs.shape:
        if targets.is_floating_point():
            return Finding(
                FAIL,
                f"{shapes}: {type(loss_fn).__name__} needs class indices as int64",
                "make the targets integer class indices (tensor.long())",
            )
        low, high = targets.min().item(), targets.max().item()
        if low < 0 or high >= outputs.shape[1]:
            return Finding(
                FAIL,
                f"{shapes}: class targets span [{low}, {high}] but the model has {outputs.shape[1]} outputs",
                "set data.num_outputs to the number of classes, or fix the labels",
            )
        rows = outputs.float()
        if (
            isinstance(loss_fn, nn.CrossEntropyLoss)
            and rows.min() >= 0
            and torch.allclose(rows.sum(dim=1), torch.ones(len(rows), device=rows.device), atol=1e-3)
        ):
            return Finding(
                FAIL,
                f"{shapes}: the predictions are probabilities (rows sum to 1), but "
                "CrossEntropyLoss expects raw logits",
                "remove the final softmax from the model",
            )
    if (
        isinstance(loss_fn, nn.BCEWithLogitsLoss)
        and outputs.numel()
        and outputs.min() >= 0
        and outputs.max() <= 1
    ):
        return Finding(
            WARN,
            f"{shapes}: every prediction is in [0, 1]; BCEWithLogitsLoss expects logits",
            "remove a final sigmoid, if the model has one",
        )
    try:
        with torch.no_grad():
            loss_fn(outputs, targets)
    except Exception as error:
        return Finding(
            FAIL,
            f"{shapes}: the loss raised {type(error).__name__}: {str(error).splitlines()[0]}",
            "match the target's shape and dtype to the loss",
        )
    return Finding(PASS, shapes)


@check("model and data on the same device")
def check_devices(probe: Probe) -> Finding:
    model, device, inputs, targets = probe.setup.model, probe.setup.device, probe.inputs, probe.targets
    elsewhere = [
        f"{n} on {t.device}"
        for n, t in [*model.named_parameters(), *model.named_buffers()]
        if t.device.type != device.type
    ]
    elsewhere += [
        f"batch {label} on {t.device}"
        for label, t in (("inputs", inputs), ("targets", targets))
        if t.device.type != device.type
    ]
    if elsewhere:
        return Finding(
            FAIL,
            f"expected {device}: " + ", ".join(elsewhere[:5]),
            "move the model and every batch to one device (no hard-coded .cuda())",
        )
    count = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    return Finding(PASS, f"{count} parameters and buffers and the batch on {device}")


@check("loss is finite")
def check_loss(probe: Probe) -> Finding:
    probe.setup.model.train()
    try:
        probe.loss = probe.setup.loss_fn(probe.setup.model(probe.inputs), probe.targets)
    except Exception as error:
        return Finding(SKIP, f"no loss ({type(error).__name__}); see check 2")
    if not torch.isfinite(probe.loss).all():
        return Finding(FAIL, f"loss is {probe.loss.item()}", ADVICE_NAN)
    return Finding(PASS, f"loss {probe.loss.item():.4g}")


@check("gradients exist and are not exploding")
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


@check("parameters change after optimizer.step()")
def check_update(probe: Probe) -> Finding:
    model = probe.setup.model
    optimizer = probe.setup.optimizer_factory(model)
    trainable = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    not_optimized = [n for pid, n in trainable.items() if pid not in in_optimizer]
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
    if not trainable:
        return Finding(
            FAIL,
            "nothing changed: every parameter is frozen (requires_grad=False)",
            "unfreeze the parameters you mean to train",
        )
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


@check("validation runs in eval() without gradients", needs_batch=False)
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
        inputs, targets = move_batch(*next(iter(setup.val_loader)), setup.device, False)
        evaluate(model, [(inputs, targets)], setup.loss_fn, setup.device, setup.precision)
        model.eval()
        with torch.no_grad():
            first, second = model(inputs), model(inputs)
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
    if not torch.equal(first, second):
        return Finding(
            FAIL,
            "two eval forwards of the same batch differ: dropout or other randomness "
            "is still active in eval()",
            "use nn.Dropout (which eval() turns off), not F.dropout(..., training=True)",
        )
    return Finding(PASS, "eval() on every module, no gradient tracking, same output twice")


@check("sanity run: overfit one batch")
def check_overfit(probe: Probe, steps: int = 100) -> Finding:
    """The run's own training step (loss scaling and clipping as configured), on one batch."""
    setup = probe.setup
    if probe.loss is None or not probe.loss.requires_grad:
        return Finding(SKIP, "the loss has no gradient; see checks 5 and 6")
    model = copy.deepcopy(setup.model)
    model.train()
    model.zero_grad(set_to_none=True)
    learner = Learner(model, setup.loss_fn, setup.optimizer_factory(model), setup.precision, setup.device)
    window = [(probe.inputs, probe.targets)]
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
