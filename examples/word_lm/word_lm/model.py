"""pytorch/examples' ``RNNModel`` (LSTM flavour): embedding, dropout, a multi-layer LSTM with dropout
between layers, dropout, a linear decoder. Each batch starts from a zero hidden state (runner's
batches are independent chunks, so nothing carries over between them)."""

import torch
from torch import nn


class RNNModel(nn.Module):
    """Token ids ``(N, T)`` to logits ``(N, V, T)``, the layout ``CrossEntropyLoss`` takes for
    sequences (pytorch/examples returns ``log_softmax`` for ``NLLLoss``: the same loss)."""

    def __init__(
        self, num_tokens: int, embedding: int, hidden: int, layers: int, dropout: float, tie_weights: bool
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(num_tokens, embedding)
        self.rnn = nn.LSTM(embedding, hidden, layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(hidden, num_tokens)
        if tie_weights:  # "Using the Output Embedding to Improve Language Models" (Press & Wolf, 2016)
            if hidden != embedding:
                raise ValueError(f"tie_weights needs hidden == embedding, got {hidden} and {embedding}")
            self.decoder.weight = self.encoder.weight
        self.init_weights()

    def init_weights(self) -> None:
        """pytorch/examples' initialisation: uniform(-0.1, 0.1) embedding and decoder, zero decoder bias."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        embedded = self.drop(self.encoder(tokens))
        states, _ = self.rnn(embedded)
        return self.decoder(self.drop(states)).transpose(1, 2)


def rnn_model(
    num_outputs: int, embedding: int = 200, hidden: int = 200, layers: int = 2, dropout: float = 0.2,
    tie_weights: bool = False,
) -> RNNModel:  # fmt: skip
    """pytorch/examples' defaults (``--emsize 200 --nhid 200 --nlayers 2 --dropout 0.2``);
    ``num_outputs`` is the vocabulary size."""
    return RNNModel(num_outputs, embedding, hidden, layers, dropout, tie_weights)
