"""Built-in models. Any ``_target_`` that builds an ``nn.Module`` works the same way."""

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


def check_sizes(**sizes: Any) -> None:
    """Every size an integer >= 1 (a width of 0 trains a model that can learn nothing)."""
    for name, value in sizes.items():
        values = list(value) if isinstance(value, Sequence) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ValueError(f"{name}={value} is not allowed; {name} must be integers >= 1")


def check_dropout(dropout: Any) -> None:
    if not (isinstance(dropout, int | float) and not isinstance(dropout, bool) and 0 <= dropout < 1):
        raise ValueError(f"dropout={dropout} is not allowed; dropout must be a number in [0, 1)")


def mlp(
    input_shape: Sequence[int], num_outputs: int, hidden: Sequence[int] = (64,), dropout: float = 0.0
) -> nn.Sequential:
    """Flatten, then Linear+ReLU(+Dropout when ``dropout > 0``) per hidden width, then a Linear head.

    With ``input_shape=[10], hidden=[20], num_outputs=1`` it is exactly the gradient-clipping experiment's
    ``Sequential(Linear(10, 20), ReLU(), Linear(20, 1))`` (same parameter creation order, so the
    same initial weights under the same seed); ``Flatten`` has no parameters.
    """
    check_sizes(input_shape=input_shape, num_outputs=num_outputs)
    if list(hidden):
        check_sizes(hidden=hidden)
    check_dropout(dropout)
    widths = [math.prod(input_shape), *hidden]
    layers: list[nn.Module] = [nn.Flatten()]
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(widths[-1], num_outputs))
    return nn.Sequential(*layers)


def cnn(input_shape: Sequence[int], num_outputs: int, channels: Sequence[int] = (16, 32)) -> nn.Sequential:
    """A small conv net for ``(C, H, W)`` inputs: 3x3 conv + ReLU blocks, 2x2 pooling, a head."""
    if len(input_shape) != 3:
        raise ValueError(f"cnn needs image-shaped inputs (C, H, W), got input_shape={list(input_shape)}")
    check_sizes(input_shape=input_shape, num_outputs=num_outputs, channels=channels)
    widths = [input_shape[0], *channels]
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Conv2d(width_in, width_out, kernel_size=3, padding=1), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(widths[-1] * 4, num_outputs)]
    return nn.Sequential(*layers)


class CharRNN(nn.Module):
    """Embedding, a GRU (or LSTM), a linear head. Returns logits as ``(N, vocabulary, T)``, the layout
    ``CrossEntropyLoss`` takes for sequences, with targets ``(N, T)``."""

    def __init__(
        self, num_outputs: int, embedding: int = 32, hidden: int = 128, layers: int = 1, cell: str = "gru"
    ):
        super().__init__()
        check_sizes(num_outputs=num_outputs, embedding=embedding, hidden=hidden, layers=layers)
        cells = {"gru": nn.GRU, "lstm": nn.LSTM}
        if cell not in cells:
            raise ValueError(f"cell={cell} is not allowed; cell must be one of {', '.join(cells)}")
        self.embedding = nn.Embedding(num_outputs, embedding)
        recurrent = cells[cell]
        self.rnn = recurrent(embedding, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, num_outputs)

    def forward(self, characters: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(self.embedding(characters))
        return self.head(states).transpose(1, 2)


def char_rnn(
    input_shape: Sequence[int], num_outputs: int, embedding: int = 32, hidden: int = 128, layers: int = 1,
    cell: str = "gru",
) -> CharRNN:  # fmt: skip
    """``input_shape`` is ``[sequence length]`` (any length works); ``num_outputs`` the vocabulary."""
    return CharRNN(num_outputs, embedding, hidden, layers, cell)


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then an MLP, each added to its input."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        normed = self.attention_norm(x)
        x = x + self.attention(normed, normed, normed, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.mlp_norm(x))


class CharTransformer(nn.Module):
    """A small GPT-style model: token and position embeddings, ``layers`` identical :class:`Block`s (the
    units ``strategy=fsdp`` shards and ``activation_checkpointing`` recomputes), a final norm and a head.
    Returns logits as ``(N, vocabulary, T)``, like :class:`CharRNN`."""

    def __init__(self, num_outputs: int, context: int, width: int, heads: int, layers: int, dropout: float):
        super().__init__()
        self.tokens = nn.Embedding(num_outputs, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_outputs)

    def forward(self, characters: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(characters.shape[1], device=characters.device)
        x = self.tokens(characters) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        # contiguous: a sharded model's output must not be a view (FSDP2 hooks its backward on it).
        return self.head(self.norm(x)).transpose(1, 2).contiguous()


def char_transformer(
    input_shape: Sequence[int], num_outputs: int, width: int = 64, heads: int = 4, layers: int = 4,
    dropout: float = 0.0,
) -> CharTransformer:  # fmt: skip
    """``input_shape`` is ``[sequence length]``, the longest context; ``num_outputs`` the vocabulary."""
    check_sizes(input_shape=input_shape, num_outputs=num_outputs, width=width, heads=heads, layers=layers)
    check_dropout(dropout)
    if width % heads:
        raise ValueError(f"width={width} is not allowed with heads={heads}; width must be a multiple of it")
    return CharTransformer(num_outputs, input_shape[0], width, heads, layers, dropout)
