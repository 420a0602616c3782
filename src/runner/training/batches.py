"""What a batch may be, and how the engine uses one: moves it to the device, counts its samples, runs
the model and the loss on it. The one place that knows batch structures, so the step, validation
and doctor treat every form alike.

- ``(inputs, targets)`` (a 2-element tuple or list): ``loss(model(inputs), targets)``, the
  a hand-written training loop's step.
- A mapping (a dict, or a dataclass's fields): ``model(**batch)``; the targets, where the loss or a
  metric needs them, are ``batch[target_key]``.
- With ``loss=from_model`` (:class:`ModelLoss`) the model computes its loss: a mapping still runs
  ``model(**batch)``; a tuple or list runs ``model(*batch)``; a lone tensor ``model(batch)``.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from runner.config.errors import UserError
from runner.training.device import host_number
from runner.training.item_counts import checked_count

ACCEPTED = (
    "an (inputs, targets) pair, a dict (or dataclass) of tensors run as model(**batch), or, with "
    "loss=from_model, any batch the model takes"
)


class BatchError(UserError):
    """A batch the engine cannot use: what it got and what it accepts, in one line."""


class ModelLoss:
    """``loss=from_model``: the loss is the model's own, ``outputs.loss``, ``outputs["loss"]``, or
    the output itself when it is a scalar tensor."""

    ignore_index = -100  # what transformers' models ignore in their labels

    def __call__(self, outputs: Any, targets: Any = None) -> torch.Tensor:
        return loss_of(outputs)

    def __repr__(self) -> str:
        return "from_model"


def loss_of(outputs: Any) -> torch.Tensor:
    loss = _field(outputs, "loss")
    if loss is None and isinstance(outputs, torch.Tensor) and outputs.ndim == 0:
        loss = outputs
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        raise BatchError(
            f"loss=from_model, but the model returned {describe(outputs)}; it must return a scalar loss "
            "tensor, or an object or dict with a scalar .loss / ['loss']"
        )
    return loss


def logits_of(outputs: Any) -> torch.Tensor | None:
    """What metrics compare with the targets: ``outputs.logits``, ``outputs["logits"]``, or the output."""
    logits = _field(outputs, "logits")
    if logits is None and isinstance(outputs, torch.Tensor) and outputs.ndim > 0:
        logits = outputs
    return logits if isinstance(logits, torch.Tensor) else None


def _field(outputs: Any, name: str) -> Any:
    if isinstance(outputs, Mapping):
        return outputs.get(name)
    return getattr(outputs, name, None) if not isinstance(outputs, torch.Tensor) else None


def as_mapping(batch: Any) -> Mapping[str, Any] | None:
    if isinstance(batch, Mapping):
        return batch
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return {item.name: getattr(batch, item.name) for item in dataclasses.fields(batch)}
    return None


def is_pair(batch: Any) -> bool:
    return isinstance(batch, tuple | list) and len(batch) == 2


def map_tensors(
    value: Any, fn: Callable[[Any], Any], whole: Callable[[Any], bool] = lambda value: False
) -> Any:
    """``fn`` on every tensor inside a batch's structure (dataclasses, mappings, lists, tuples, named
    tuples), the structure kept (a dataclass becomes a copy), other objects as they are: the one walk
    that moving, splitting and detaching a batch share. ``whole``: a part given to ``fn`` as it is,
    not walked into."""
    if isinstance(value, torch.Tensor) or whole(value):
        return fn(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {item.name: map_tensors(getattr(value, item.name), fn, whole)
                   for item in dataclasses.fields(value) if item.init}  # fmt: skip
        return dataclasses.replace(value, **changes)
    if isinstance(value, Mapping):
        return type(value)({key: map_tensors(item, fn, whole) for key, item in value.items()})
    if isinstance(value, tuple | list):
        mapped = [map_tensors(item, fn, whole) for item in value]
        return type(value)(*mapped) if hasattr(value, "_fields") else type(value)(mapped)
    return value


def to_device(batch: Any, device: torch.device, channels_last: bool = False) -> Any:
    """Every tensor inside the batch, asynchronously (from pinned memory on CUDA); 4-D float tensors
    (images) channels-last if asked. The structure is kept (a dataclass becomes a copy)."""

    def moved(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.to(device, non_blocking=True)
        if channels_last and tensor.ndim == 4 and tensor.is_floating_point():
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    return map_tensors(batch, moved)


def first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    mapping = as_mapping(batch)
    values = mapping.values() if mapping is not None else batch if isinstance(batch, tuple | list) else ()
    for value in values:
        if (found := first_tensor(value)) is not None:
            return found
    return None


def count_samples(batch: Any, target_key: str) -> int:
    """The samples in a batch: the targets' first dimension for a pair (or a mapping's targets),
    else the first tensor's."""
    if is_pair(batch) and isinstance(batch[1], torch.Tensor):
        return len(batch[1])
    mapping = as_mapping(batch)
    if mapping is not None and isinstance(mapping.get(target_key), torch.Tensor):
        return len(mapping[target_key])
    tensor = first_tensor(batch)
    if tensor is None or tensor.ndim == 0:
        raise BatchError(f"a batch of {describe(batch)} holds no batched tensor; runner takes {ACCEPTED}")
    return len(tensor)


@dataclass(frozen=True)
class Forward:
    loss: torch.Tensor
    outputs: Any  # what the model returned
    targets: Any  # None where the batch names none (a model's own loss without labels)


def forward(model: Callable, batch: Any, loss_fn: Callable, target_key: str) -> Forward:
    """Run the model and the loss on a batch already on the device."""
    if isinstance(loss_fn, ModelLoss):
        mapping = as_mapping(batch)
        if mapping is not None:
            outputs, targets = call_model(model, batch, (), mapping), mapping.get(target_key)
        elif isinstance(batch, tuple | list):
            outputs, targets = call_model(model, batch, batch, {}), batch[-1] if len(batch) > 1 else None
        else:
            outputs, targets = model(batch), None
        return Forward(loss_of(outputs), outputs, targets)
    if is_pair(batch):
        inputs, targets = batch
        outputs = model(inputs)
        return Forward(loss_fn(outputs, targets), outputs, targets)
    mapping = as_mapping(batch)
    if mapping is None or target_key not in mapping:
        check_structure(batch, loss_fn, target_key)  # raises the error that says what is wrong
    outputs, targets = call_model(model, batch, (), mapping), mapping[target_key]
    logits = logits_of(outputs)
    return Forward(loss_fn(outputs if logits is None else logits, targets), outputs, targets)


def call_model(model: Callable, batch: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``model(*args, **kwargs)``; a model whose ``forward`` does not take the batch's parts that way
    is a one-line error saying how the batch was passed."""
    try:
        return model(*args, **kwargs)
    except TypeError as error:
        if "forward()" not in str(error):
            raise
        passed = "model(**batch)" if kwargs else "model(*batch)"
        raise BatchError(
            f"a batch of {describe(batch)} is passed as {passed}, and the model refused it ({error}); "
            "make forward take those names (or **kwargs), or make the batch an (inputs, targets) pair"
        ) from None


def check_structure(batch: Any, loss_fn: Callable, target_key: str) -> None:
    """The :class:`BatchError` :func:`forward` would raise for this batch, without running the model
    (doctor's first check)."""
    count_samples(batch, target_key)
    if isinstance(loss_fn, ModelLoss) or is_pair(batch):
        return
    mapping = as_mapping(batch)
    if mapping is None:
        raise BatchError(f"a batch of {describe(batch)} cannot be used with loss={loss_name(loss_fn)}; "
                         f"runner takes {ACCEPTED}")  # fmt: skip
    if target_key not in mapping:
        raise BatchError(
            f"a batch of {describe(batch)} has no '{target_key}' (data.target_key) for "
            f"loss={loss_name(loss_fn)}; set data.target_key to the key holding the targets, or use "
            "loss=from_model for a model that computes its own loss"
        )


def loss_name(loss_fn: Callable) -> str:
    return type(loss_fn).__name__ if not isinstance(loss_fn, ModelLoss) else "from_model"


def loss_items(batch: Any, loss_fn: Callable, target_key: str = "labels") -> int | float | torch.Tensor:
    """How many items the loss over ``batch`` averages, read from the batch before the model runs (the
    step weights each micro-batch by it): :func:`loss_elements` of the targets, which for
    ``loss=from_model`` are a mapping's labels (those not -100 that its loss scores:
    :func:`scored_targets`). Counted where the batch is: a batch in host memory (the data loader's)
    gives a number, one a data set put on the device a 0-d tensor there, read at the next log step."""
    samples = count_samples(batch, target_key)
    mapping = as_mapping(batch)
    if is_pair(batch) and not isinstance(loss_fn, ModelLoss):
        targets = batch[1]
    elif mapping is not None:
        targets = mapping.get(target_key)
    else:  # a model's own loss on a tuple or a tensor: it says its count in its output, or samples
        targets = None
    count = loss_elements(loss_fn, scored_targets(batch, targets, loss_fn), samples)
    return host_number(count) if isinstance(count, torch.Tensor) else count


def scored_targets(batch: Any, targets: Any, loss_fn: Callable) -> Any:
    """The targets a model's own loss scores. A causal language model in transformers' convention
    takes its inputs as its labels (``labels`` equal to ``input_ids`` wherever they are not -100) and
    shifts them inside: position t predicts label t + 1, so no sequence's first label is scored. Those
    labels with the first of each sequence ignored (without a read on the host); other targets as
    they are."""
    mapping = as_mapping(batch)
    if not isinstance(loss_fn, ModelLoss) or mapping is None or not isinstance(targets, torch.Tensor):
        return targets
    inputs = mapping.get("input_ids")
    if not isinstance(inputs, torch.Tensor) or inputs.shape != targets.shape or targets.ndim < 2:
        return targets
    ignored = targets == ModelLoss.ignore_index
    causal = ((targets == inputs) | ignored).all()
    first_ignored = targets.clone()
    first_ignored[..., 0] = ModelLoss.ignore_index
    return torch.where(causal, first_ignored, targets)


def items_in_outputs(outputs: Any, read_device: bool = False) -> int | float | torch.Tensor | None:
    """What a model with its own loss says its loss averaged over: ``outputs.num_items_in_batch`` or
    ``outputs["num_items_in_batch"]`` (a number or a 0-d tensor, checked: ``item_counts``); None where it
    does not say."""
    items = _field(outputs, "num_items_in_batch")
    if not isinstance(items, int | float | torch.Tensor) or isinstance(items, bool):
        return None
    return checked_count(items, read_device)


def loss_elements(loss_fn: Callable, targets: Any, samples: int) -> int | torch.Tensor:
    """How many elements the loss averaged over: the targets that are not ``ignore_index`` for class
    indices (tokens, for sequences; with class weights, the sum of their weights, the loss's divisor),
    every element for other targets, else the samples. Weighting each batch's mean loss by this makes
    the validation loss the mean over those elements."""
    if not isinstance(targets, torch.Tensor):
        return samples
    if targets.is_floating_point() or targets.ndim == 0:
        return targets.numel() or samples
    ignore_index = getattr(loss_fn, "ignore_index", None)
    if ignore_index is None:
        return targets.numel()
    kept = targets != ignore_index
    weight = getattr(loss_fn, "weight", None)
    if isinstance(weight, torch.Tensor):  # class weights: the mean is over the kept targets' weights
        return weight.to(targets.device)[targets[kept]].sum()
    return kept.sum()


def describe(value: Any, depth: int = 0) -> str:
    """A short picture of a batch: ``dict(input_ids=Tensor[8, 32] int64, ...)``."""
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if depth > 1:
        return type(value).__name__
    mapping = as_mapping(value)
    if mapping is not None:
        inner = ", ".join(f"{key}={describe(item, depth + 1)}" for key, item in list(mapping.items())[:6])
        return f"{type(value).__name__}({inner})"
    if isinstance(value, Sequence) and not isinstance(value, str):
        inner = ", ".join(describe(item, depth + 1) for item in list(value)[:6])
        return f"{type(value).__name__} of {len(value)} ({inner})"
    return type(value).__name__
