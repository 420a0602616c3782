"""Sum-reduced losses: a loss that adds over its samples (``reduction="sum"``, as pytorch/examples'
VAE's) is accumulated as a sum, so a window of micro-batches gives exactly the big batch's gradient,
and is reported per sample (its sum over the samples divided by their count).

Which losses sum: a loss object whose ``reduction`` is ``"sum"`` (torch's losses, or one's own with
that attribute); with ``loss=from_model``, a model whose ``loss_reduction`` attribute is ``"sum"``."""

from collections.abc import Callable, Iterator

from torch import nn

from runner.config.errors import ConfigError, show
from runner.training.batches import ModelLoss

# What runner can train: one number per batch, a mean (KLDivLoss's batchmean is one) or a sum.
TRAINABLE_REDUCTIONS = ("mean", "sum", "batchmean")


def sums_its_loss(loss_fn: Callable, model: nn.Module) -> bool:
    """Whether the loss over a batch is a sum over its samples rather than a mean."""
    if isinstance(loss_fn, ModelLoss):
        return any(getattr(inner, "loss_reduction", None) == "sum" for inner in unwrapped(model))
    return getattr(loss_fn, "reduction", None) == "sum"


def unwrapped(model: nn.Module) -> Iterator[nn.Module]:
    """The model and the modules inside its wrappers (DDP's ``module``, torch.compile's ``_orig_mod``)."""
    while isinstance(model, nn.Module):
        yield model
        model = getattr(model, "module", None) or getattr(model, "_orig_mod", None)


def check_reduction(loss_fn: Callable) -> None:
    """A loss's ``reduction`` must give one number per batch: ``none`` (a loss per sample) would fail
    at the first backward, and torch takes a typo (``summ``) until the first forward."""
    reduction = getattr(loss_fn, "reduction", None)
    if isinstance(reduction, str) and reduction not in TRAINABLE_REDUCTIONS:
        raise ConfigError(
            f"loss.reduction={show(reduction)}: runner trains on one loss per batch; loss.reduction must be "
            "mean (the default), sum (accumulated as a sum, logged per sample) or batchmean (KLDivLoss)"
        )
