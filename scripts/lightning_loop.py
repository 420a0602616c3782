"""The benchmark's optional third column: the same loop as ``raw_loop.py`` written for PyTorch Lightning
(automatic optimization, ``gradient_clip_val``, ``accumulate_grad_batches``, loss and grad norm to
TensorBoard every step). Lightning is never a dependency: ``bench.py`` runs this only if it is installed.

    python scripts/lightning_loop.py RUN_DIR FEATURES HIDDEN OUTPUTS TASK ACCUMULATE STEPS
"""

import sys

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from raw_loop import build
from torch import nn
from torch.utils.data import DataLoader


class Loop(L.LightningModule):
    def __init__(self, model: nn.Module, loss_fn: nn.Module) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = self.loss_fn(self.model(inputs), targets)
        self.log("train/loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        norms = [p.grad.norm() for p in self.parameters() if p.grad is not None]
        self.log("train/grad_norm", torch.linalg.vector_norm(torch.stack(norms)))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    run_dir, features, hidden, outputs, task, accumulate, steps = sys.argv[1:]
    features, outputs, accumulate, steps = int(features), int(outputs), int(accumulate), int(steps)
    model, train_set, loss_fn = build(features, hidden, outputs, task)
    trainer = L.Trainer(
        max_steps=steps, max_epochs=-1, devices=1, gradient_clip_val=1.0, accumulate_grad_batches=accumulate,
        log_every_n_steps=1, logger=TensorBoardLogger(run_dir, name="", version=""),
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=0, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(Loop(model, loss_fn), DataLoader(train_set, batch_size=32, shuffle=True))


if __name__ == "__main__":
    main()
