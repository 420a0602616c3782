"""A character-level language-modelling data set on a short public-domain text shipped with runner:
the opening of William Shakespeare's *Coriolanus* (Act I, Scene 1; public domain). Recurrent models on
text are the classic example of where gradient clipping matters."""

from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from runner.data.arguments import check_fraction

TEXT_FILE = Path(__file__).with_name("coriolanus.txt")


def load_text(
    seq_len: int = 64, stride: int = 16, val_fraction: float = 0.15
) -> tuple[TensorDataset, TensorDataset]:
    """Windows of ``seq_len`` characters; the target is the same window shifted by one character.
    The last ``val_fraction`` of the text is held out for validation."""
    check_fraction(val_fraction)
    text = TEXT_FILE.read_text()
    vocabulary = sorted(set(text))
    index = {char: position for position, char in enumerate(vocabulary)}
    ids = torch.tensor([index[char] for char in text], dtype=torch.long)
    split = int(len(ids) * (1 - val_fraction))

    def windows(part: torch.Tensor) -> TensorDataset:
        starts = range(0, len(part) - seq_len - 1, stride)
        inputs = torch.stack([part[start : start + seq_len] for start in starts])
        targets = torch.stack([part[start + 1 : start + seq_len + 1] for start in starts])
        return TensorDataset(inputs, targets)

    train, val = windows(ids[:split]), windows(ids[split:])
    train.classes = val.classes = vocabulary
    return train, val
