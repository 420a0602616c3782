"""pytorch/examples' ``RNNModel`` (LSTM flavour): embedding, dropout, a multi-layer LSTM with dropout
between layers, dropout, a linear decoder. With ``carry_state`` it reads the text as the reference
does: each batch's LSTM state goes on from the previous batch's, detached (truncated backpropagation
through time), which needs the batches laid out as ``word_lm.load_words(columns=...)`` lays them out;
without it, each batch starts from a zero state."""

import torch
from torch import nn


class CarriedHidden:
    """The LSTM's ``(h, c)`` carried from one batch to the next, detached, as pytorch/examples'
    ``repackage_hidden`` does. runner's carried-state protocol (``state_dict``, ``load_state_dict``,
    ``reset``): runner resets it each epoch and keeps it in checkpoints, so a resumed run goes on
    with the state it stopped with."""

    def __init__(self) -> None:
        self.hidden: tuple[torch.Tensor, torch.Tensor] | None = None

    def reset(self) -> None:
        self.hidden = None  # the LSTM starts from zeros, as pytorch/examples' init_hidden

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {} if self.hidden is None else {"h": self.hidden[0], "c": self.hidden[1]}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.hidden = (state["h"], state["c"]) if state else None

    def to_continue(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The state to start this batch from; a batch of another size starts a new read (zeros)."""
        if self.hidden is None or self.hidden[0].shape[1] != batch_size:
            return None
        return self.hidden[0].to(device), self.hidden[1].to(device)

    def keep(self, hidden: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.hidden = (hidden[0].detach(), hidden[1].detach())


class RNNModel(nn.Module):
    """Token ids ``(N, T)`` to logits ``(N, V, T)``, the layout ``CrossEntropyLoss`` takes for
    sequences (pytorch/examples returns ``log_softmax`` for ``NLLLoss``: the same loss)."""

    def __init__(
        self, num_tokens: int, embedding: int, hidden: int, layers: int, dropout: float, tie_weights: bool,
        carry_state: bool = False,
    ) -> None:  # fmt: skip
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
        # Training's state (runner resets and saves it), and evaluation's own, from zeros at each
        # evaluation as pytorch/examples' evaluate() starts: validation never moves training's.
        self.carried_state = CarriedHidden() if carry_state else None
        self.evaluation_state = CarriedHidden() if carry_state else None

    def init_weights(self) -> None:
        """pytorch/examples' initialisation: uniform(-0.1, 0.1) embedding and decoder, zero decoder bias."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def train(self, mode: bool = True) -> "RNNModel":
        if not mode and self.evaluation_state is not None:
            self.evaluation_state.reset()  # model.eval(): an evaluation starts
        return super().train(mode)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        carried = self.carried_state if self.training else self.evaluation_state
        start = carried.to_continue(len(tokens), tokens.device) if carried is not None else None
        embedded = self.drop(self.encoder(tokens))
        states, hidden = self.rnn(embedded, start)
        if carried is not None:
            carried.keep(hidden)
        return self.decoder(self.drop(states)).transpose(1, 2)


def rnn_model(
    num_outputs: int, embedding: int = 200, hidden: int = 200, layers: int = 2, dropout: float = 0.2,
    tie_weights: bool = False, carry_state: bool = False,
) -> RNNModel:  # fmt: skip
    """pytorch/examples' defaults (``--emsize 200 --nhid 200 --nlayers 2 --dropout 0.2``);
    ``num_outputs`` is the vocabulary size; ``carry_state``: each batch goes on from the last one's
    LSTM state, as the reference trains."""
    return RNNModel(num_outputs, embedding, hidden, layers, dropout, tie_weights, carry_state)
