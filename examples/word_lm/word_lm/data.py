"""Word-level tokens of the text runner ships (Shakespeare, *Coriolanus* I.1), cut into contiguous
chunks of ``bptt`` tokens, as pytorch/examples' ``Corpus`` and ``get_batch`` read a text."""

import re

import torch
from torch.utils.data import TensorDataset

from runner.data.text import TEXT_FILE

END_OF_LINE = "<eos>"
# A word (with its apostrophes: "know't", "we'll") or one punctuation mark.
TOKEN = re.compile(r"[\w']+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Words and punctuation marks, and ``<eos>`` at the end of every line (blank ones too), as
    pytorch/examples' ``Corpus.tokenize`` marks line ends."""
    return [token for line in text.splitlines() for token in [*TOKEN.findall(line), END_OF_LINE]]


def vocabulary(tokens: list[str]) -> list[str]:
    """Every distinct token, in order of first appearance (pytorch/examples' ``Dictionary``)."""
    return list(dict.fromkeys(tokens))


def chunks(ids: torch.Tensor, bptt: int, columns: int | None = None) -> TensorDataset:
    """Non-overlapping chunks of ``bptt`` tokens; the target is the chunk shifted by one. In stream
    order; or, with ``columns`` (the batch size), as pytorch/examples' ``batchify`` and ``get_batch``
    read the stream: cut into ``columns`` equal parts, batch k holds the k-th chunk of every part, so
    each row of a batch goes on where the same row of the batch before stopped (read in order, batches
    of ``columns``). Only whole chunks: the reference's last, shorter one is left out."""
    if columns is None:
        count = (len(ids) - 1) // bptt
        inputs = ids[: count * bptt].view(count, bptt)
        targets = ids[1 : count * bptt + 1].view(count, bptt)
        return TensorDataset(inputs, targets)
    per_column = len(ids) // columns
    parts = ids[: per_column * columns].view(columns, per_column)
    count = (per_column - 1) // bptt

    def batch_major(tokens: torch.Tensor) -> torch.Tensor:
        """(columns, count * bptt) -> (count * columns, bptt), the k-th chunk of every column in turn."""
        return tokens.reshape(columns, count, bptt).transpose(0, 1).reshape(count * columns, bptt)

    return TensorDataset(batch_major(parts[:, : count * bptt]), batch_major(parts[:, 1 : count * bptt + 1]))


def load_words(
    bptt: int = 35, val_fraction: float = 0.15, columns: int | None = None, val_columns: int | None = None
) -> tuple[TensorDataset, TensorDataset]:
    """``(train, val)`` of ``(input, target)`` pairs of token ids, each ``(bptt,)``. The vocabulary is
    built from the whole text; the last ``val_fraction`` of the token stream is validation. With
    ``columns`` and ``val_columns`` (the batch sizes), laid out for a model that carries its state from
    batch to batch (:func:`chunks`). Both data sets carry the vocabulary as ``classes`` (runner saves it in
    checkpoints as ``label_mapping``)."""
    tokens = tokenize(TEXT_FILE.read_text())
    words = vocabulary(tokens)
    index = {word: position for position, word in enumerate(words)}
    ids = torch.tensor([index[token] for token in tokens], dtype=torch.long)
    split = int(len(ids) * (1 - val_fraction))
    train, val = chunks(ids[:split], bptt, columns), chunks(ids[split:], bptt, val_columns)
    train.classes = val.classes = words
    return train, val
