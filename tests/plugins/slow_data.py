"""Test-only data: the built-in classification, slowed down so a test can signal a run mid-training."""

import time

from torch.utils.data import Dataset

from runner.data import make_classification


class Slow(Dataset):
    def __init__(self, inner: Dataset, seconds_per_item: float) -> None:
        self.inner = inner
        self.seconds_per_item = seconds_per_item

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):
        time.sleep(self.seconds_per_item)
        return self.inner[index]


def slow_classification(
    seconds_per_item: float = 0.001, nan_sample: int | None = None, seconds_to_build: float = 0.0, **kwargs
):
    """``nan_sample``: that training sample's first feature becomes NaN (for the non-finite guard).
    ``seconds_to_build``: a data set slow to load (a job that is starting)."""
    time.sleep(seconds_to_build)
    train, val = make_classification(**kwargs)
    if nan_sample is not None:
        train.tensors[0][nan_sample, 0] = float("nan")
    return Slow(train, seconds_per_item), val


def failing_classification(fail: bool = False, **kwargs):
    """For sweeps with a deliberately failing job."""
    if fail:
        raise RuntimeError("deliberate failure for the test")
    return make_classification(**kwargs)
