"""A causal language model trained by runner with no wrapper: the model computes its own loss from
a dict batch (``loss=from_model``), as Hugging Face transformers' causal LMs do."""

from causal_lm.data import PaddingCollator, character_lines
from causal_lm.gpt2 import tiny_gpt2
from causal_lm.model import CausalLMOutput, TinyCausalLM, shifted_cross_entropy

__all__ = [
    "CausalLMOutput",
    "PaddingCollator",
    "TinyCausalLM",
    "character_lines",
    "shifted_cross_entropy",
    "tiny_gpt2",
]
