"""The first batch of a run, with a collation failure named as one: a batch that torch's default
collate (or ``data.collate_fn``) cannot build from the data set's samples is a one-line error naming
``data.collate_fn``, before the run writes anything, not a traceback from inside the DataLoader. The
validation batches' collator of the user's is tried too, on the first and the last validation batch
(a collator for training only, timm's Mixup, refuses an odd one), not an epoch later."""

import collections
import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, Sampler, default_collate

from runner.data.sample_seeds import own_collate
from runner.training.batches import BatchError, describe
from runner.training.random_state import kept_random_state


def first_batch(batches: Iterator[Any], loader: DataLoader, sampler: Sampler | None) -> Any:
    """``next(batches, None)``. An error that the collate function raises on the first batch's samples
    becomes a :class:`BatchError`; any other (the data set's own) keeps its traceback."""
    try:
        return next(batches, None)
    except Exception as error:
        message = collation_failure(loader, sampler)
        if message is None:
            raise
        raise BatchError(message) from error


def collation_failure(loader: DataLoader, sampler: Sampler | None) -> str | None:
    """Fetch the first batch's samples here, in this process, and collate them: what the collate
    function says when it fails on them; None when the samples cannot be fetched (the data set's
    error) or collate fine (the error came from elsewhere). A stream's samples are not replayed."""
    if sampler is None or loader.batch_size is None:
        return None
    indices = list(itertools.islice(iter(sampler), loader.batch_size))
    try:
        samples = [loader.dataset[index] for index in indices]
    except Exception:
        return None
    collate_fn = own_collate(loader.collate_fn)
    try:
        collate_fn(samples)
    except Exception as error:
        default = collate_fn is default_collate
        which = (
            "torch's default collate (data.collate_fn=null)"
            if default
            else f"data.collate_fn ({type(collate_fn).__name__})"
        )
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        fix = (
            "set data.collate_fn to a _target_ collator that builds one batch from a list of them "
            "(variable-length sequences need padding)"
            if default
            else "fix data.collate_fn so it builds one batch from a list of them"
        )
        return (
            f"the first batch cannot be collated: {which} raised {reason} on {len(samples)} samples "
            f"like {describe(samples[0])}; {fix}"
        )
    return None


def check_validation_collation(loader: DataLoader, key: str) -> None:
    """The validation loader's first and last batch collated here, in this process, by the user's
    collator (``key``: ``data.collate_fn``, or ``data.val_collate_fn`` where it is set), every random
    state kept (Mixup draws); a failure is one line naming the key and how validation is collated
    otherwise. A stream's batches are not read ahead, nor torch's default collate tried."""
    sampler, collate = loader.sampler, own_collate(loader.collate_fn)
    if collate is default_collate or loader.batch_size is None or not hasattr(sampler, "__len__"):
        return
    batch_size, count = loader.batch_size, len(sampler)
    # The last batch's indices held, not the whole set's (a large validation set).
    last = list(collections.deque(iter(sampler), maxlen=count - (count - 1) // batch_size * batch_size))
    batches = {"first": list(itertools.islice(iter(sampler), batch_size)), "last": last}
    for which, chosen in batches.items():
        if not chosen:
            return
        try:
            samples = [loader.dataset[index] for index in chosen]
        except Exception:  # the data set's own error: validation shows it as it is
            return
        try:
            with kept_random_state():
                collate(samples)
        except Exception as error:
            reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            collator = type(collate).__name__
            raise BatchError(
                f"the {which} validation batch cannot be collated: {key} ({collator}) "
                f"raised {reason} on {len(samples)} samples like {describe(samples[0])}; validation batches "
                "are collated by data.collate_fn unless data.val_collate_fn is set: for a collator that "
                "only training batches need (Mixup, CutMix), set data.val_collate_fn=default"
            ) from None
        if which == "first" and count <= batch_size:
            return
