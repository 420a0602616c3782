"""Whether the model, the data and the loss fit together, tried on the first batch before a run writes
anything: a mismatch (shapes, dtypes, class labels out of range) is one line naming what met what,
not a traceback at step 1. An error raised in the user's own code keeps its traceback: it is theirs
to read."""

import copy
import sysconfig
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

import runner
from runner.checkpoint.contents import check_loadable
from runner.checkpoint.files import CheckpointError
from runner.training.batches import BatchError, ModelLoss, describe, forward, items_in_outputs, to_device
from runner.training.carried import NoCarriedState, carried_state_of
from runner.training.item_counts import ItemCountError
from runner.training.memory_agreement import Agreement
from runner.training.modes import evaluation_mode
from runner.training.oom import OutOfMemoryStop, OutOfMemoryUnsaved, first_part_within_memory
from runner.training.random_state import kept_random_state

# Code that is not the user's: the standard library, installed packages, runner itself.
LIBRARY_PATHS = [sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")]
NOT_USER_CODE = tuple(str(Path(path).resolve()) for path in [*LIBRARY_PATHS, Path(runner.__file__).parent])
CLASS_LOSSES = (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss)


def raised_in_user_code(error: BaseException) -> bool:
    traceback = error.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if not filename.startswith("<") and not str(Path(filename).resolve()).startswith(NOT_USER_CODE):
            return True
        traceback = traceback.tb_next
    return False


def check_labels(loss_fn: Callable, outputs: Any, targets: Any) -> None:
    """Class labels for a classification loss must index the model's outputs: checked before the loss
    sees them (on a GPU an out-of-range label is a device-side assert that ends the process)."""
    if not (isinstance(loss_fn, CLASS_LOSSES) and isinstance(targets, torch.Tensor)):
        return
    if not isinstance(outputs, torch.Tensor) or outputs.ndim < 2:
        return  # a shape the loss itself will name
    classes = outputs.shape[1]
    if classes == 1:
        raise BatchError(
            f"loss={type(loss_fn).__name__} over the model's 1 output is 0 whatever the model does (a "
            "softmax over one class); a classifier needs one output per class (data.num_outputs), a "
            "regression another loss (loss=mse)"
        )
    if targets.is_floating_point():
        return  # class probabilities
    labels = targets[targets != loss_fn.ignore_index]
    if labels.numel() and (labels.min() < 0 or labels.max() >= classes):
        raise BatchError(
            f"the first batch has class labels {int(labels.min())}..{int(labels.max())}, but the model has "
            f"{classes} outputs (labels must be 0..{classes - 1}); check data.num_outputs and the data "
            "set's labels"
        )


def check_fit(
    model: torch.nn.Module, batch: Any, loss_fn: Callable, device: torch.device,
    autocast: Callable[[], AbstractContextManager], target_key: str, memory: Agreement | None = None,
) -> int:  # fmt: skip
    """The model and the loss on ``batch`` once, in eval mode without gradients: every random state
    kept (``random_state.py``), no statistics updated, a carried state (``carried.py``) handed back as
    it was (a resumed run's, loaded from its checkpoint, goes on from there), so the run trains
    exactly as it would without the check. Returns the samples checked: the batch's, or fewer where
    they did not fit in memory (``memory``: every process alike)."""
    carried = carried_state_of(model)
    kept = None if isinstance(carried, NoCarriedState) else copy.deepcopy(carried.state_dict())
    checked_loss = loss_fn
    if not isinstance(loss_fn, ModelLoss):

        def checked_loss(outputs: Any, targets: Any) -> Any:
            check_labels(loss_fn, outputs, targets)
            return loss_fn(outputs, targets)

    try:
        with evaluation_mode(model), torch.no_grad(), autocast(), kept_random_state():
            result, checked = first_part_within_memory(  # a batch too large for memory: a part (oom.py)
                lambda part: forward(model, to_device(part, device), checked_loss, target_key),
                batch,
                target_key,
                memory,
            )
            if isinstance(loss_fn, ModelLoss):  # its count, on any device: read once, here
                items_in_outputs(result.outputs, read_device=True)
        if kept is not None:  # as checkpoints will save it, after a batch: before the run writes
            check_loadable(carried.state_dict(), "the model's carried_state (carried_state_dict)")
    except (BatchError, ItemCountError, CheckpointError, OutOfMemoryStop, OutOfMemoryUnsaved):
        raise
    except Exception as error:
        if raised_in_user_code(error):
            raise
        reason = f"{type(error).__name__}: {error}".splitlines()[0]
        raise BatchError(
            f"the model ({type(model).__name__}) and the data do not fit: on the first batch, "
            f"{describe(batch)}, the model and loss={type(loss_fn).__name__} failed ({reason}); check "
            "that the model config matches the data (data.input_shape, data.num_outputs) and the loss "
            "matches the targets; python -m runner doctor runs the debugging checklist"
        ) from None
    finally:
        if kept is not None:
            carried.load_state_dict(kept)
    return checked
