"""Runner's text (Shakespeare's *Coriolanus*, I.1) as a causal-LM data set: one example per non-empty
line, tokenised by characters. Lines differ in length, so batches need a padding collator."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from causal_lm.model import IGNORE_INDEX
from runner.data.text import TEXT_FILE

END_OF_LINE = "\n"  # ends every example, so the model learns where a line stops


class TokenisedLines(Dataset):
    """``{"input_ids": LongTensor[T]}`` per line; ``classes`` is the vocabulary (id -> character)."""

    def __init__(self, examples: list[torch.Tensor], vocabulary: list[str]):
        self.examples, self.classes = examples, vocabulary

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.examples[index]}


def character_lines(
    max_length: int = 64, val_fraction: float = 0.15
) -> tuple[TokenisedLines, TokenisedLines]:
    """Every non-empty line followed by an end-of-line token, cut to ``max_length`` tokens; the last
    ``val_fraction`` of the lines are the validation set. The vocabulary is every character of the
    text (53), as runner's ``data=text`` has it."""
    text = TEXT_FILE.read_text()
    vocabulary = sorted(set(text))
    index = {char: position for position, char in enumerate(vocabulary)}
    lines = [line + END_OF_LINE for line in text.splitlines() if line.strip()]
    examples = [torch.tensor([index[char] for char in line[:max_length]]) for line in lines]
    split = round(len(examples) * (1 - val_fraction))
    return TokenisedLines(examples[:split], vocabulary), TokenisedLines(examples[split:], vocabulary)


@dataclass
class PaddingCollator:
    """Right-pads ``input_ids`` to the batch's longest example and adds what a transformers-style
    causal LM takes: ``attention_mask`` (1 real token, 0 padding) and ``labels``: the input ids, with
    -100 at padding *and at position 0*. A causal LM never predicts the first token (its loss scores
    ``logits[:, :-1]`` against ``labels[:, 1:]``), so with -100 there the labels that are not -100 are
    exactly the tokens the loss averages over. Runner weights each validation batch's loss by that
    count, which makes ``val/loss`` the exact mean over every predicted token of the validation set
    (and ``val/ppl`` the per-token perplexity), however the batches are padded."""

    pad_id: int = 0

    def __call__(self, items: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        length = max(len(item["input_ids"]) for item in items)
        input_ids = torch.full((len(items), length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(items), length), dtype=torch.long)
        for row, item in enumerate(items):
            tokens = item["input_ids"]
            input_ids[row, : len(tokens)] = tokens
            attention_mask[row, : len(tokens)] = 1
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        labels[:, 0] = IGNORE_INDEX
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
