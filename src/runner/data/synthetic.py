"""Synthetic data sets for quick experiments: quick to build, sized by config."""

import torch
from torch.utils.data import TensorDataset

from runner.data.arguments import check_counts


def _generator(seed: int | None) -> torch.Generator | None:
    """``None`` draws from the run's (seeded) global RNG, as a loop seeded once at its start does."""
    return None if seed is None else torch.Generator().manual_seed(seed)


def make_regression(
    num_train: int = 256,
    num_val: int = 64,
    num_features: int = 10,
    target_scale: float = 50.0,
    learnable: bool = False,
    noise: float = 0.1,
    seed: int | None = 0,
) -> tuple[TensorDataset, TensorDataset]:
    """The gradient-clipping experiment's data: ``x = randn(n, 10)``, ``y = randn(n, 1) * 50``.

    Those targets are pure noise (the gradient-clipping experiment only needs large gradients).
    ``learnable=True`` makes ``y`` a noisy linear function of ``x`` instead, so a model can fit it.
    """
    check_counts(num_train=num_train, num_val=num_val, num_features=num_features)
    generator = _generator(seed)
    true_weights = torch.randn(num_features, 1, generator=generator) if learnable else None

    def draw(num_samples: int) -> TensorDataset:
        inputs = torch.randn(num_samples, num_features, generator=generator)
        if true_weights is None:
            targets = torch.randn(num_samples, 1, generator=generator) * target_scale
        else:
            signal = inputs @ true_weights / num_features**0.5
            targets = (signal + noise * torch.randn(num_samples, 1, generator=generator)) * target_scale
        return TensorDataset(inputs, targets)

    return draw(num_train), draw(num_val)


def make_classification(
    num_train: int = 512,
    num_val: int = 128,
    num_features: int = 20,
    num_classes: int = 4,
    class_separation: float = 2.0,
    seed: int | None = 0,
) -> tuple[TensorDataset, TensorDataset]:
    """Gaussian blobs, one per class, around centres drawn once per data set."""
    check_counts(num_train=num_train, num_val=num_val, num_features=num_features, num_classes=num_classes)
    generator = _generator(seed)
    centres = torch.randn(num_classes, num_features, generator=generator) * class_separation

    def draw(num_samples: int) -> TensorDataset:
        labels = torch.randint(num_classes, (num_samples,), generator=generator)
        inputs = centres[labels] + torch.randn(num_samples, num_features, generator=generator)
        return TensorDataset(inputs, labels)

    train, val = draw(num_train), draw(num_val)
    train.classes = val.classes = [f"class_{index}" for index in range(num_classes)]
    return train, val
