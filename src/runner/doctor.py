"""``runner doctor``: the seed's debugging order as a command.

When training breaks, check the simple engineering problems first, in this order. Every check runs
where it can (a failure does not stop the later ones); each says what it found and what to do.
"""

import copy
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from runner.engine import evaluate, move_batch
from runner.precision import Precision

PASS, WARN, FAIL, SKIP = "pass", "warn", "FAIL", "skip"

# The seed's memory and stability table, as advice.
ADVICE_NAN = "lower the learning rate; then check the inputs and add gradient clipping (clip=1.0)"
ADVICE_LOAD = "check architecture and key names; look at state_dict().keys()"
ELEMENTWISE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCELoss, nn.BCEWithLogitsLoss)
CLASS_INDEX_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


@dataclass
class CheckResult:
    number: int
    check: str
    status: str
    found: str
    advice: str = ""


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


def describe(tensor: torch.Tensor) -> str:
    text = f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"
    if tensor.numel() and (tensor.is_floating_point() or not tensor.is_complex()):
        finite = tensor[torch.isfinite(tensor)] if tensor.is_floating_point() else tensor
        if finite.numel():
            text += f" in [{finite.min().item():.4g}, {finite.max().item():.4g}]"
    return text


def check_batch(batch: Any) -> tuple[CheckResult, tuple[torch.Tensor, torch.Tensor] | None]:
    name = "one batch loads"
    if not (isinstance(batch, list | tuple) and len(batch) == 2):
        return CheckResult(
            1,
            name,
            FAIL,
            f"a batch is a {type(batch).__name__}, not (inputs, targets)",
            "make the data set yield (input, target) pairs",
        ), None
    inputs, targets = batch
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
        return CheckResult(
            1,
            name,
            FAIL,
            "; ".join(problems) + f" ({found})",
            "fix the data: clean or drop the bad samples, check the preprocessing",
        ), batch
    return CheckResult(1, name, PASS, found), batch


def check_shapes(
    model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor
) -> CheckResult:
    name = "shapes and dtypes fit model and loss"
    try:
        with torch.no_grad():
            outputs = model(inputs)
    except Exception as error:
        return CheckResult(
            2,
            name,
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
            return CheckResult(
                2,
                name,
                FAIL,
                f"{shapes}: {type(loss_fn).__name__} silently broadcasts them to "
                f"{tuple(broadcast)} and averages every pair",
                "give prediction and target the same "
                "shape (e.g. targets of shape (N, 1), or squeeze the prediction)",
            )
    if isinstance(loss_fn, CLASS_INDEX_LOSSES) and outputs.ndim == 2 and targets.shape != outputs.shape:
        if targets.is_floating_point():
            return CheckResult(
                2,
                name,
                FAIL,
                f"{shapes}: {type(loss_fn).__name__} needs class indices as int64",
                "make the targets integer class indices (tensor.long())",
            )
        low, high = targets.min().item(), targets.max().item()
        if low < 0 or high >= outputs.shape[1]:
            return CheckResult(
                2,
                name,
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
            return CheckResult(
                2,
                name,
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
        return CheckResult(
            2,
            name,
            WARN,
            f"{shapes}: every prediction is in [0, 1]; BCEWithLogitsLoss expects logits",
            "remove a final sigmoid, if the model has one",
        )
    try:
        with torch.no_grad():
            loss_fn(outputs, targets)
    except Exception as error:
        return CheckResult(
            2,
            name,
            FAIL,
            f"{shapes}: the loss raised {type(error).__name__}: {str(error).splitlines()[0]}",
            "match the target's shape and dtype to the loss",
        )
    return CheckResult(2, name, PASS, shapes)


def check_devices(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device
) -> CheckResult:
    name = "model and data on the same device"
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
        return CheckResult(
            3,
            name,
            FAIL,
            f"expected {device}: " + ", ".join(elsewhere[:5]),
            "move the model and every batch to one device (no hard-coded .cuda())",
        )
    count = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    return CheckResult(3, name, PASS, f"{count} parameters and buffers and the batch on {device}")


def check_loss(
    model: nn.Module, loss_fn: Callable, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[CheckResult, torch.Tensor | None]:
    name = "loss is finite"
    try:
        loss = loss_fn(model(inputs), targets)
    except Exception as error:
        return CheckResult(4, name, SKIP, f"no loss ({type(error).__name__}); see check 2"), None
    if not torch.isfinite(loss).all():
        return CheckResult(4, name, FAIL, f"loss is {loss.item()}", ADVICE_NAN), loss
    return CheckResult(4, name, PASS, f"loss {loss.item():.4g}"), loss


def check_gradients(model: nn.Module, loss: torch.Tensor | None, clip: float | None) -> CheckResult:
    name = "gradients exist and are not exploding"
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        return CheckResult(
            5,
            name,
            WARN,
            "the model has no trainable parameters (every requires_grad is False)",
            "unfreeze the parameters you mean to train",
        )
    if loss is None or not loss.requires_grad:
        return CheckResult(5, name, SKIP, "no loss to backpropagate; see checks 2 and 4")
    model.zero_grad(set_to_none=True)
    loss.backward()
    missing = [n for n, p in trainable if p.grad is None]
    nonfinite = [n for n, p in trainable if p.grad is not None and not torch.isfinite(p.grad).all()]
    norms = sorted(((p.grad.norm().item(), n) for n, p in trainable if p.grad is not None), reverse=True)
    total = math.sqrt(sum(norm**2 for norm, _ in norms))
    largest = ", ".join(f"{n} {norm:.3g}" for norm, n in norms[:3])
    if missing:
        return CheckResult(
            5,
            name,
            FAIL,
            f"{len(missing)} trainable parameters get no gradient: " + ", ".join(missing[:6]),
            "remove unused layers, or find where the graph is cut "
            "(.detach(), .item(), .numpy(), torch.no_grad in forward)",
        )
    if nonfinite:
        return CheckResult(5, name, FAIL, "non-finite gradients in " + ", ".join(nonfinite[:6]), ADVICE_NAN)
    found = f"total norm {total:.4g}; largest: {largest}"
    if clip is not None and total > 10 * clip:
        return CheckResult(
            5,
            name,
            WARN,
            found + f"; {total / clip:.0f}x the clip norm {clip:g}",
            "gradients this large are usually a too-high learning rate; clipping will hold them "
            "at clip, but lower optimizer.lr if the loss is unstable",
        )
    if clip is None and total > 1e3:
        return CheckResult(
            5, name, WARN, found + " with clipping off", "turn on clipping (clip=1.0), lower the lr"
        )
    return CheckResult(5, name, PASS, found + (f"; clip={clip:g}" if clip else "; clipping off"))


def check_update(model: nn.Module, optimizer: torch.optim.Optimizer) -> CheckResult:
    name = "parameters change after optimizer.step()"
    trainable = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    not_optimized = [n for pid, n in trainable.items() if pid not in in_optimizer]
    lrs = sorted({group["lr"] for group in optimizer.param_groups})
    if not trainable:
        return CheckResult(
            6,
            name,
            FAIL,
            "nothing changed: every parameter is frozen (requires_grad=False)",
            "unfreeze the parameters you mean to train",
        )
    if not changed:
        reason = "optimizer.lr=0" if lrs == [0] else "no gradient reached the optimizer"
        return CheckResult(
            6,
            name,
            FAIL,
            f"no parameter changed ({reason})",
            "set a learning rate > 0; call zero_grad before backward, not between backward and step",
        )
    if not_optimized:
        return CheckResult(
            6,
            name,
            FAIL,
            f"{len(not_optimized)} trainable parameters are not in the optimizer: "
            + ", ".join(not_optimized[:6]),
            "build the optimizer over model.parameters()",
        )
    unchanged = [n for n in trainable.values() if n not in changed]
    rates = ", ".join(f"{lr:g}" for lr in lrs)
    found = f"{len(changed)} of {len(trainable)} trainable tensors changed (lr {rates})"
    if unchanged:
        return CheckResult(6, name, WARN, found + "; unchanged: " + ", ".join(unchanged[:6]))
    return CheckResult(6, name, PASS, found)


def check_validation(setup: Setup) -> CheckResult:
    name = "validation runs in eval() without gradients"
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
        return CheckResult(
            7,
            name,
            FAIL,
            ("modules in train mode during validation: " + ", ".join(in_train[:6]))
            if in_train
            else "gradients tracked during validation in: " + ", ".join(with_grad[:6]),
            "validate under model.eval() and torch.no_grad(); do not call .train() in forward",
        )
    if moved:
        return CheckResult(
            7,
            name,
            FAIL,
            "buffers changed during validation: " + ", ".join(moved[:6]),
            "a module updates statistics in eval: check batch-norm and custom modules",
        )
    if not torch.equal(first, second):
        return CheckResult(
            7,
            name,
            FAIL,
            "two eval forwards of the same batch differ: dropout or other randomness "
            "is still active in eval()",
            "use nn.Dropout (which eval() turns off), not F.dropout(..., training=True)",
        )
    return CheckResult(7, name, PASS, "eval() on every module, no gradient tracking, same output twice")


def check_overfit(setup: Setup, inputs: torch.Tensor, targets: torch.Tensor, steps: int = 100) -> CheckResult:
    name = "sanity run: overfit one batch"
    model = copy.deepcopy(setup.model)
    optimizer = setup.optimizer_factory(model)
    model.train()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with setup.precision.autocast():
            loss = setup.loss_fn(model(inputs), targets)
        if not loss.requires_grad:
            return CheckResult(8, name, SKIP, "the loss has no gradient; see checks 5 and 6")
        loss.backward()
        if setup.clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), setup.clip)
        optimizer.step()
        losses.append(loss.item())
    first, last = losses[0], min(losses[-5:])
    found = f"loss {first:.4g} -> {last:.4g} in {steps} steps on one batch"
    if not math.isfinite(last):
        return CheckResult(8, name, FAIL, found, ADVICE_NAN)
    if last > 0.7 * first:
        return CheckResult(
            8,
            name,
            FAIL,
            found + " (it should fall clearly)",
            "raise the learning rate a little, check that targets match inputs",
        )
    return CheckResult(8, name, PASS, found)


def guarded(number: int, name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """A check that cannot run (the loss raises on a mistake an earlier check named) is skipped."""
    try:
        return check()
    except Exception as error:
        return CheckResult(
            number, name, SKIP, f"could not run: {type(error).__name__}: {str(error).splitlines()[0]}"
        )


def run_checks(setup: Setup) -> list[CheckResult]:
    """The seven checks in the seed's order, then the overfit sanity run."""
    try:
        batch = next(iter(setup.train_loader))
        first, batch = check_batch(batch)
    except Exception as error:
        first, batch = (
            CheckResult(
                1,
                "one batch loads",
                FAIL,
                f"loading raised {type(error).__name__}: {error}",
                "check the data set's __getitem__ and the collate",
            ),
            None,
        )
    results = [first]
    if batch is None:
        later = (
            "shapes and dtypes fit model and loss",
            "model and data on the same device",
            "loss is finite",
            "gradients exist and are not exploding",
            "parameters change after optimizer.step()",
        )
        results += [
            CheckResult(n, check, SKIP, "needs a batch (check 1)") for n, check in enumerate(later, 2)
        ]
        results.append(
            guarded(7, "validation runs in eval() without gradients", lambda: check_validation(setup))
        )
        return results
    inputs, targets = move_batch(batch[0], batch[1], setup.device, False)
    results.append(
        guarded(2, "shapes and dtypes fit model and loss",
                lambda: check_shapes(setup.model, setup.loss_fn, inputs, targets))
    )  # fmt: skip
    results.append(check_devices(setup.model, inputs, targets, setup.device))
    setup.model.train()
    loss_result, loss = check_loss(setup.model, setup.loss_fn, inputs, targets)
    results.append(loss_result)
    results.append(
        guarded(
            5, "gradients exist and are not exploding", lambda: check_gradients(setup.model, loss, setup.clip)
        )
    )
    # check_gradients left this batch's gradients on the parameters: the step below uses them.
    results.append(
        guarded(6, "parameters change after optimizer.step()",
                lambda: check_update(setup.model, setup.optimizer_factory(setup.model)))
    )  # fmt: skip
    results.append(guarded(7, "validation runs in eval() without gradients", lambda: check_validation(setup)))
    results.append(guarded(8, "sanity run: overfit one batch", lambda: check_overfit(setup, inputs, targets)))
    return results


def format_table(results: list[CheckResult]) -> str:
    lines = []
    for result in results:
        lines.append(f"{result.number}. [{result.status:>4}] {result.check}: {result.found}")
        if result.advice and result.status != PASS:
            lines.append(f"   what to do: {result.advice}")
    failed = [r for r in results if r.status == FAIL]
    lines.append("")
    lines.append(f"{len(failed)} check(s) failed" if failed else "all checks passed")
    return "\n".join(lines)


def to_json(results: list[CheckResult]) -> str:
    return json.dumps([asdict(result) for result in results], indent=2)
