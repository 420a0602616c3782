"""Test-only model with a classic NaN, for runner doctor: its forward takes the square root of a
linear layer's outputs, so every negative output is NaN (before any training step)."""

from collections.abc import Sequence

from torch import Tensor, nn

from runner.models import mlp


class SqrtOutputs(nn.Module):
    """runner's MLP with ``.sqrt()`` on its outputs: NaN wherever an output is negative."""

    def __init__(
        self,
        input_shape: Sequence[int],
        num_outputs: int,
        hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
    ):
        super().__init__()
        self.body = mlp(input_shape, num_outputs, hidden, dropout)

    def forward(self, inputs: Tensor) -> Tensor:
        return self.body(inputs).sqrt()
