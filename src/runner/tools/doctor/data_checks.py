"""The checklist's first checks: the data, the shapes, the devices, the loss. Batches go through the
engine's own ``forward`` (``runner.training.batches``), so every batch form the engine takes is
checked as ``train`` would use it."""

from typing import Any

import torch
from torch import nn

from runner.data.sample_seeds import reads_alike
from runner.tools.doctor.probe import (
    ADVICE_BAD_DATA,
    ADVICE_FORWARD_NAN,
    ADVICE_NAN_LOSS,
    ADVICE_NAN_WEIGHTS,
    FAIL,
    PASS,
    SKIP,
    WARN,
    Finding,
    Probe,
    model_outputs,
    named_tensors,
    named_values,
    nonfinite_parameters,
    nonfinite_text,
    value_text,
)
from runner.training.batches import (
    BatchError,
    ModelLoss,
    as_mapping,
    check_structure,
    count_samples,
    describe,
    forward,
    is_pair,
    logits_of,
    to_device,
)
from runner.training.modes import set_apart, start_training

ELEMENTWISE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCELoss, nn.BCEWithLogitsLoss)
CLASS_INDEX_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)
SHOWN_VALUES = 8  # of a batch, in check 1's finding
# The training set's sample 0, read twice with every global generator started alike, came out different.
ADVICE_OWN_GENERATOR = (
    "sample 0 read twice at the same epoch differs: the data set draws from a generator the run's seed "
    "does not reach (one it made itself, such as np.random.default_rng() or random.Random() in "
    "__init__), so its draws depend on the worker that reads it and a resumed run draws anew",
    "draw from the global generators (torch.rand, random.random, np.random.normal), which runner seeds "
    "per sample, or make the generator in __getitem__ from torch.initial_seed()",
)


def summarize(value: Any) -> str:
    """A tensor's shape, dtype and finite range; any other value as ``describe`` pictures it."""
    if not isinstance(value, torch.Tensor):
        return describe(value)
    text = f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if value.numel() and (value.is_floating_point() or not value.is_complex()):
        finite = value[torch.isfinite(value)] if value.is_floating_point() else value
        if finite.numel():
            text += f" in [{finite.min().item():.4g}, {finite.max().item():.4g}]"
    return text


def check_batch(probe: Probe) -> Finding:
    setup = probe.setup
    try:
        batch = next(iter(setup.train_loader))
    except Exception as error:
        return Finding(
            FAIL,
            f"loading raised {type(error).__name__}: {error}",
            "check the data set's __getitem__ and the collate",
        )
    batch = to_device(batch, setup.device)
    try:
        check_structure(batch, setup.loss_fn, setup.target_key)
    except BatchError as error:
        return Finding(
            FAIL,
            str(error),
            "make each sample an (input, target) pair or a dict holding data.target_key, or use "
            "loss=from_model for a model that computes its own loss",
        )
    probe.batch = batch
    values = list(named_values(batch))
    problems = []
    if count_samples(batch, setup.target_key) == 0 or any(
        isinstance(value, torch.Tensor) and value.numel() == 0 for _, value in values
    ):
        problems.append("the batch is empty")
    for name, tensor in named_tensors(batch):
        if tensor.is_floating_point():
            nan, inf = torch.isnan(tensor).sum().item(), torch.isinf(tensor).sum().item()
            if nan or inf:
                problems.append(f"{name} hold {nan} NaN and {inf} Inf values")
    found = "; ".join(f"{name} {summarize(value)}" for name, value in values[:SHOWN_VALUES])
    if len(values) > SHOWN_VALUES:
        found += f"; and {len(values) - SHOWN_VALUES} more"
    if problems:
        return Finding(
            FAIL,
            "; ".join(problems) + f" ({found})",
            ADVICE_BAD_DATA,
        )
    if reads_alike(setup.train_loader.dataset) is False:
        return Finding(WARN, f"{found}; {ADVICE_OWN_GENERATOR[0]}", ADVICE_OWN_GENERATOR[1])
    return Finding(PASS, found)


class LossInputs:
    """Stands in for the loss inside ``forward``: keeps what the engine would hand the loss, so the
    shapes are checked before the loss (which may raise on them) runs."""

    prediction: Any = None
    targets: Any = None

    def __call__(self, prediction: Any, targets: Any) -> torch.Tensor:
        self.prediction, self.targets = prediction, targets
        return torch.zeros(())


def model_call(batch: Any, loss_fn: Any) -> str:
    """How the engine calls the model on this batch, for a finding."""
    if as_mapping(batch) is not None:
        return "model(**batch)"
    if is_pair(batch) and not isinstance(loss_fn, ModelLoss):
        inputs = batch[0]
        return f"model(inputs {tuple(inputs.shape)})" if isinstance(inputs, torch.Tensor) else "model(inputs)"
    return "model(*batch)" if isinstance(batch, tuple | list) else "model(batch)"


def model_raised(batch: Any, loss_fn: Any, error: Exception) -> Finding:
    return Finding(
        FAIL,
        f"{model_call(batch, loss_fn)} raised {type(error).__name__}: {str(error).splitlines()[0]}",
        "make the model's input size match the data (data.input_shape, the model's first layer)",
    )


def shape_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return "none" if value is None else describe(value)


def check_shapes(probe: Probe) -> Finding:
    setup = probe.setup
    if isinstance(setup.loss_fn, ModelLoss):
        return check_model_loss(probe)
    recorded = LossInputs()
    try:
        with torch.no_grad():
            forward(setup.model, probe.batch, recorded, setup.target_key)
    except Exception as error:
        return model_raised(probe.batch, setup.loss_fn, error)
    outputs, targets = recorded.prediction, recorded.targets
    prediction = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else describe(outputs)
    shapes = f"prediction {prediction}, target {shape_text(targets)}"
    if isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor):
        finding = loss_shape_finding(setup.loss_fn, outputs, targets, shapes)
        if finding is not None:
            return finding
    try:
        with torch.no_grad():
            setup.loss_fn(outputs, targets)
    except Exception as error:
        return Finding(
            FAIL,
            f"{shapes}: the loss raised {type(error).__name__}: {str(error).splitlines()[0]}",
            "match the target's shape and dtype to the loss",
        )
    return Finding(PASS, shapes)


def loss_shape_finding(
    loss_fn: Any, outputs: torch.Tensor, targets: torch.Tensor, shapes: str
) -> Finding | None:
    """The mistakes a loss takes silently, or reports obscurely: broadcasting, float class targets,
    classes out of range, probabilities where logits belong."""
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
        counted = targets[targets != getattr(loss_fn, "ignore_index", None)]  # the loss skips the others
        low, high = (counted.min().item(), counted.max().item()) if counted.numel() else (0, 0)
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
    return None


def check_model_loss(probe: Probe) -> Finding:
    """``loss=from_model``: the model must return its loss as a scalar; its logits are what metrics
    compare with the labels."""
    setup = probe.setup
    try:
        with torch.no_grad():
            result = forward(setup.model, probe.batch, setup.loss_fn, setup.target_key)
    except BatchError as error:
        return Finding(
            FAIL,
            str(error),
            "return the loss from forward (transformers' models compute it when the batch holds labels)",
        )
    except Exception as error:
        return model_raised(probe.batch, setup.loss_fn, error)
    logits = logits_of(result.outputs)
    return Finding(
        PASS,
        f"the model returns a scalar loss; logits {shape_text(logits)}, labels {shape_text(result.targets)}",
    )


def check_devices(probe: Probe) -> Finding:
    model, device = probe.setup.model, probe.setup.device
    elsewhere = [
        f"{n} on {t.device}"
        for n, t in [*model.named_parameters(), *model.named_buffers()]
        if t.device.type != device.type
    ]
    batch = named_tensors(probe.batch)
    elsewhere += [f"batch {name} on {t.device}" for name, t in batch if t.device.type != device.type]
    if elsewhere:
        return Finding(
            FAIL,
            f"expected {device}: " + ", ".join(elsewhere[:5]),
            "move the model and every batch to one device (no hard-coded .cuda())",
        )
    count = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    return Finding(PASS, f"{count} parameters and buffers and the batch on {device}")


def check_loss(probe: Probe) -> Finding:
    """A NaN or Inf loss before any training step: the parameters, the model's outputs or the loss
    itself, named in that order (the first one that is not finite is where it starts)."""
    setup = probe.setup
    start_training(setup.model, set_apart(setup.model))  # as the run starts (training/modes.py)
    try:
        result = forward(setup.model, probe.batch, setup.loss_fn, setup.target_key)
    except Exception as error:
        return Finding(SKIP, f"no loss ({type(error).__name__}); see check 2")
    probe.loss = result.loss
    loss = value_text(probe.loss.detach().float().mean().item()) if probe.loss.numel() else "empty"
    outputs = nonfinite_text("the model's outputs", model_outputs(result.outputs))
    if not torch.isfinite(probe.loss).all():
        broken, kind = nonfinite_parameters(setup.model)
        if broken:
            return Finding(
                FAIL,
                f"the loss is {loss}: the parameters are {kind} before any training step: "
                + ", ".join(broken[:6]),
                ADVICE_NAN_WEIGHTS,
            )
        if outputs:
            return Finding(
                FAIL, f"the loss is {loss}: {outputs}, before any training step", ADVICE_FORWARD_NAN
            )
        return Finding(
            FAIL,
            f"the loss is {loss} although the model's outputs are finite",
            ADVICE_NAN_LOSS,
        )
    if outputs:
        return Finding(
            WARN, f"loss {loss}, but {outputs}", "the loss ignores them for now; " + ADVICE_FORWARD_NAN
        )
    return Finding(PASS, f"loss {loss}")
