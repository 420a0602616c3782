"""Test plug-in: every process's parameters after each optimizer step, saved per rank, so a test can
compare what each process holds (only rank 0 writes the run's own files)."""

import os
from pathlib import Path

import torch


class RankWeights:
    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_step_end(self, context) -> None:
        rank = int(os.environ.get("RANK", "0"))
        weights = {name: p.detach().clone() for name, p in context.model.named_parameters()}
        torch.save(weights, self.folder / f"rank{rank}_step{context.step}.pt")
