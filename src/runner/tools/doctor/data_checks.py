"""The checklist's first checks: the data, the shapes, the devices, the loss."""

import torch
from torch import nn

from runner.tools.doctor.probe import ADVICE_NAN, FAIL, PASS, SKIP, WARN, Finding, Probe
from runner.training.batches import to_device

ELEMENTWISE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCELoss, nn.BCEWithLogitsLoss)
CLASS_INDEX_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


def describe(tensor: torch.Tensor) -> str:
    text = f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"
    if tensor.numel() and (tensor.is_floating_point() or not tensor.is_complex()):
        finite = tensor[torch.isfinite(tensor)] if tensor.is_floating_point() else tensor
        if finite.numel():
            text += f" in [{finite.min().item():.4g}, {finite.max().item():.4g}]"
    return text


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
    probe.inputs, probe.targets = to_device((inputs, targets), probe.setup.device)
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


def check_loss(probe: Probe) -> Finding:
    probe.setup.model.train()
    try:
        probe.loss = probe.setup.loss_fn(probe.setup.model(probe.inputs), probe.targets)
    except Exception as error:
        return Finding(SKIP, f"no loss ({type(error).__name__}); see check 2")
    if not torch.isfinite(probe.loss).all():
        return Finding(FAIL, f"loss is {probe.loss.item()}", ADVICE_NAN)
    return Finding(PASS, f"loss {probe.loss.item():.4g}")
