"""Models that write their own ``training_step`` (test plug-in): one written as runner's default step,
and three whose step trains nothing, which runner must say in one line."""

import math

import torch
from torch import nn


class TwoLayers(nn.Module):
    """A small classifier in two named parts (``body``, ``head``) for the classification data."""

    def __init__(self, input_shape, num_outputs: int, hidden=(16,), dropout: float = 0.0) -> None:
        super().__init__()
        self.body = nn.Linear(math.prod(input_shape), hidden[0])
        self.head = nn.Linear(hidden[0], num_outputs)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(inputs.flatten(1))))

    def loss(self, batch) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.cross_entropy(self(inputs), targets)


class OwnStep(TwoLayers):
    """Runner's default step written out (backward, then update), saying that it ran."""

    def training_step(self, batch, step) -> dict[str, torch.Tensor]:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        return {"loss": loss, "ran_own_step": torch.ones(())}


class NeverUpdates(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss)
        return loss


class UpdatesWithoutBackward(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        step.update("optimizer")
        return self.loss(batch).detach()


class NamesAnotherOptimizer(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss, "generator")
        step.update("generator")
        return loss


class HeadEveryOtherStep(TwoLayers):
    """With optimizers ``body`` and ``head``: the body updated every step, the head every other (as a
    WGAN updates its critic n times per generator update)."""

    steps = 0

    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        self.steps += 1
        names = ("body", "head") if self.steps % 2 == 0 else ("body",)
        step.backward(loss, *names)
        for name in names:
            step.update(name)
        return loss


class FailsAfterItsUpdate(TwoLayers):
    """A step with a bug after its update: doctor reports it and puts the model back."""

    def training_step(self, batch, step) -> torch.Tensor:
        step.backward(self.loss(batch))
        step.update()
        raise RuntimeError("a bug after the update")
