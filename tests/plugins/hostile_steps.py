"""Models whose ``training_step`` a user gets wrong (test plug-in): updates on a window's earlier
micro-batch only, returns a loss runner cannot log (complex, on the meta device, without a gradient),
returns a non-finite loss beside a finite update, takes one argument, or is written as Lightning's."""

import torch
from own_steps import TwoLayers


class UpdatesOnOneMicroBatch(TwoLayers):
    """Calls ``step.update`` on one micro-batch of each ``window`` calls only (``update_on``, from 0), by a
    counter of its calls: with ``accumulate=window``, on that micro-batch of every window."""

    def __init__(self, *args, update_on: int = 0, window: int = 2, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.update_on, self.window, self.calls = update_on, window, 0

    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss)
        if self.calls % self.window == self.update_on:
            step.update()
        self.calls += 1
        return loss


class ReturnsComplex(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        return loss * (1 + 1j)


class ReturnsMeta(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        return torch.empty((), device="meta")


class ReturnsDetached(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        return torch.tensor(0.5)


class ReturnsNonFinite(TwoLayers):
    """A finite update beside a loss that is NaN on the second step (its own counter)."""

    calls = 0

    def training_step(self, batch, step) -> dict[str, torch.Tensor]:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        self.calls += 1
        return {"loss": loss, "other": loss * float("nan") if self.calls == 2 else loss}


class OneArgument(TwoLayers):
    def training_step(self, batch) -> torch.Tensor:
        return self.loss(batch)


class LightningStyle(TwoLayers):
    """A LightningModule's step as it is: (batch, batch_idx), returns a loss, touches no optimizer."""

    def training_step(self, batch, batch_idx) -> torch.Tensor:
        return self.loss(batch)


class LightningStepRenamed(TwoLayers):
    """Lightning's step with its second argument renamed: it returns a loss and touches no optimizer."""

    def training_step(self, batch, index) -> torch.Tensor:
        return self.loss(batch)


class ReturnsAFloatBeside(TwoLayers):
    def training_step(self, batch, step) -> dict:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        return {"loss": loss, "lr_hint": 0.5}


class ReturnsAVector(TwoLayers):
    def training_step(self, batch, step) -> torch.Tensor:
        loss = self.loss(batch)
        step.backward(loss)
        step.update()
        return loss.reshape(1)


class ReturnsNothing(TwoLayers):
    def training_step(self, batch, step) -> None:
        step.backward(self.loss(batch))
        step.update()


class BackwardsANan(TwoLayers):
    """A NaN loss on the second step, backwarded: its update is skipped for its gradient."""

    calls = 0

    def training_step(self, batch, step) -> torch.Tensor:
        self.calls += 1
        loss = self.loss(batch) * (float("nan") if self.calls == 2 else 1.0)
        step.backward(loss)
        step.update()
        return loss


class LightningOneArgument(TwoLayers):
    """Lightning 2's step without batch_idx, on a module with Lightning's configure_optimizers."""

    def training_step(self, batch) -> torch.Tensor:
        return self.loss(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
