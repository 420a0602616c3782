"""Test plug-in: distillation from a teacher frozen by hand at build time (``.eval()``), with dropout and
batch norm, as users of timm and torchvision write it."""

import torch
import torch.nn.functional as F
from torch import nn


class Distiller(nn.Module):
    """A student learning the labels and the teacher's softened scores; the model returns its own loss."""

    def __init__(self, temperature: float = 2.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.teacher = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10)
        )
        self.student = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 10)
        )

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            taught = self.teacher(images)
        logits = self.student(images)
        soft = F.kl_div(
            F.log_softmax(logits / self.temperature, dim=1),
            F.softmax(taught / self.temperature, dim=1),
            reduction="batchmean",
        )
        loss = F.cross_entropy(logits, labels) + self.temperature**2 * soft
        return {"loss": loss, "logits": logits}


def distiller(temperature: float = 2.0) -> Distiller:
    """The teacher frozen as the recipes freeze it: no gradients, and ``eval()`` for its dropout and its
    batch norm's statistics."""
    model = Distiller(temperature)
    model.teacher.requires_grad_(False).eval()
    return model
