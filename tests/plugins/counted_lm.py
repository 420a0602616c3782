"""The causal-LM example's model, saying in its output how many items its loss averaged over
(``num_items_in_batch``), as a model whose batch cannot show it would: runner weighs by what it says.
Needs ``examples/causal_lm`` on the path."""

from dataclasses import dataclass

import torch
from causal_lm.model import IGNORE_INDEX, TinyCausalLM


@dataclass
class CountedOutput:
    logits: torch.Tensor
    loss: torch.Tensor | None
    num_items_in_batch: torch.Tensor | None


class CountedCausalLM(TinyCausalLM):
    def forward(self, input_ids, attention_mask=None, labels=None) -> CountedOutput:
        output = super().forward(input_ids, attention_mask, labels)
        items = None if labels is None else (labels[:, 1:] != IGNORE_INDEX).sum()
        return CountedOutput(output.logits, output.loss, items)


class CountedAsNumber(TinyCausalLM):
    """The same count as a Python number (a model that counts its labels on the host): runner must
    not make a device tensor of it, a blocking copy per micro-batch on a GPU."""

    def forward(self, input_ids, attention_mask=None, labels=None) -> CountedOutput:
        output = super().forward(input_ids, attention_mask, labels)
        items = None if labels is None else int((labels[:, 1:] != IGNORE_INDEX).sum())
        return CountedOutput(output.logits, output.loss, items)
