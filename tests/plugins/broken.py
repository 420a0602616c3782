"""Test-only data with a classic mistake, for runner doctor."""

from torch.utils.data import TensorDataset

from runner.data import make_regression


def squeezed_regression(**kwargs):
    """Targets of shape (N,) against a model predicting (N, 1): MSE silently broadcasts."""
    train, val = make_regression(**kwargs)
    return tuple(TensorDataset(d.tensors[0], d.tensors[1].squeeze(1)) for d in (train, val))


def one_nan_sample(**kwargs):
    """The learnable regression with a NaN in one training sample: one window per epoch goes bad."""
    train, val = make_regression(**{**kwargs, "learnable": True})
    inputs = train.tensors[0].clone()
    inputs[5, 0] = float("nan")
    return TensorDataset(inputs, train.tensors[1]), val
