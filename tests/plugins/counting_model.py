"""Test-only model that does not resume exactly: runner's MLP, whose outputs scale with a count of the
training forwards it keeps in a plain attribute, outside its state_dict (a resumed run starts it at 0)."""

from collections.abc import Sequence

from torch import Tensor, nn

from runner.models import mlp


class CountsOutsideStateDict(nn.Module):
    def __init__(
        self, input_shape: Sequence[int], num_outputs: int, hidden: Sequence[int] = (64,), dropout=0.0
    ):
        super().__init__()
        self.body = mlp(input_shape, num_outputs, hidden, dropout)
        self.calls = 0

    def forward(self, inputs: Tensor) -> Tensor:
        if self.training:
            self.calls += 1
        return self.body(inputs) * (1 + 0.01 * self.calls)
