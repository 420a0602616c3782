"""The word LM example's model as a user ports it most simply: one carried LSTM state, read and kept by
every forward, in training and evaluation alike (no state of evaluation's own). Needs
``examples/word_lm`` on the path."""

from word_lm.model import RNNModel


class OneStateRNNModel(RNNModel):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.evaluation_state = self.carried_state  # no reset at eval(): the one state goes on

    def train(self, mode: bool = True) -> "OneStateRNNModel":
        return super(RNNModel, self).train(mode)


def one_state_rnn_model(
    num_outputs: int, embedding: int = 200, hidden: int = 200, layers: int = 2, dropout: float = 0.2,
    tie_weights: bool = False, carry_state: bool = False,
) -> OneStateRNNModel:  # fmt: skip
    return OneStateRNNModel(num_outputs, embedding, hidden, layers, dropout, tie_weights, carry_state)
