"""The 8x8 hand-written digits, shipped with runner so the default experiment needs no download.

``digits.csv.gz`` is the copy of the UCI "Optical Recognition of Handwritten Digits" test set
(E. Alpaydin, C. Kaynak, 1998; CC BY 4.0) that scikit-learn bundles: 1797 images, 64 pixel counts
in 0..16, then the label.
"""

import gzip
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Subset, TensorDataset

from runner.data.arguments import check_fraction

DIGITS_FILE = Path(__file__).with_name("digits.csv.gz")
DIGIT_CLASSES = [str(digit) for digit in range(10)]


def load_digits(val_fraction: float = 0.2, split_seed: int = 0) -> tuple[Subset, Subset]:
    """Images as ``(1, 8, 8)`` floats in [0, 1] and integer labels, split by a fixed seed.

    The split depends only on ``split_seed``, never on the run's seed, so runs with different
    seeds are compared on the same validation set.
    """
    check_fraction(val_fraction)
    with gzip.open(DIGITS_FILE, "rt") as handle:
        rows = np.loadtxt(handle, delimiter=",", dtype=np.float32)
    images = torch.from_numpy(rows[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    labels = torch.from_numpy(rows[:, 64]).long()
    full = TensorDataset(images, labels)

    order = torch.randperm(len(full), generator=torch.Generator().manual_seed(split_seed))
    val_size = round(len(full) * val_fraction)
    train, val = Subset(full, order[val_size:].tolist()), Subset(full, order[:val_size].tolist())
    train.classes = val.classes = DIGIT_CLASSES
    return train, val
