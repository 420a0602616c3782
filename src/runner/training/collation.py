"""The first batch of a run, with a collation failure named as one: a batch that torch's default
collate (or ``data.collate_fn``) cannot build from the data set's samples is a one-line error naming
``data.collate_fn``, before the run writes anything, not a traceback from inside the DataLoader."""

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, Sampler, default_collate

from runner.data.sample_seeds import own_collate
from runner.training.batches import BatchError, describe


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
