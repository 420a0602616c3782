"""A tiny decoder-only transformer in transformers' convention: ``forward(input_ids, attention_mask,
labels)`` returns ``.logits`` and, given labels, ``.loss``, so runner trains it as it trains a
transformers model (``loss=from_model``)."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100  # the label transformers' losses (and runner's from_model) ignore


@dataclass
class CausalLMOutput:
    logits: torch.Tensor  # (N, T, V): scores for the token after each position
    loss: torch.Tensor | None = None


def shifted_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' causal-LM loss: position t predicts token t + 1, so ``logits[:, :-1]`` are
    scored against ``labels[:, 1:]``; the mean over the labels that are not -100."""
    predicted = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    return F.cross_entropy(predicted, labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX)


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        if width % heads:
            raise ValueError(f"width={width} must be a multiple of heads={heads}")
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed`` (N, 1, T, T): True where a query may attend to a key."""
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).unbind(dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-LayerNorm: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads, dropout)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), allowed))
        return x + self.dropout(self.mlp(self.mlp_norm(x)))


class TinyCausalLM(nn.Module):
    """Token and position embeddings, ``layers`` pre-LayerNorm blocks of causal self-attention, a
    final LayerNorm and a linear head (with a bias, so ``optimizer.no_decay`` has biases and norms to
    exempt)."""

    def __init__(
        self, vocab_size: int, max_positions: int, width: int = 64, heads: int = 4, layers: int = 2,
        dropout: float = 0.0,
    ):  # fmt: skip
        super().__init__()
        self.max_positions = max_positions
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.position_embedding = nn.Embedding(max_positions, width)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> CausalLMOutput:
        """``attention_mask`` (N, T): 1 for real tokens, 0 for padding. No real token attends to
        padding, and positions count real tokens only, so a sequence gets the same logits alone, padded
        on the right (as the collator pads) or on the left (as generation pads).
        ``labels`` (N, T): the tokens to predict, -100 where nothing is."""
        length = input_ids.shape[1]
        if length > self.max_positions:
            raise ValueError(f"a sequence of {length} tokens; this model has {self.max_positions} positions")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        real = attention_mask.bool()
        positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)
        x = self.dropout(self.token_embedding(input_ids) + self.position_embedding(positions))
        causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
        itself = torch.eye(length, dtype=torch.bool, device=input_ids.device)
        # A padding position attends to itself only (a row with no key would give NaN); it is ignored.
        allowed = causal & (real[:, None, None, :] | itself)
        for block in self.blocks:
            x = block(x, allowed)
        logits = self.head(self.final_norm(x))
        loss = shifted_cross_entropy(logits, labels) if labels is not None else None
        return CausalLMOutput(logits=logits, loss=loss)
