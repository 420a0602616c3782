"""pytorch/examples' VAE, shrunk from 28x28 MNIST (784 -> 400 -> 20) to runner's 8x8 digits
(64 -> ``hidden`` -> ``latent``). Its loss is the reference's: binary cross-entropy of the
reconstruction plus the KL divergence, summed over the batch; the model computes it (``loss=from_model``)
and says it sums (``loss_reduction``), so runner accumulates it as a sum and reports it per sample, as
the reference prints it. Like the reference, it samples its noise in every forward, eval included."""

import torch
from torch import nn
from torch.nn import functional as F


def vae_loss(recon_x: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """Reconstruction + KL divergence losses summed over all elements and batch (the reference's)."""
    pixels = recon_x.shape[-1]
    bce = F.binary_cross_entropy(recon_x, x.view(-1, pixels), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


class VAE(nn.Module):
    loss_reduction = "sum"  # its loss adds over the samples (runner.training.reduction)

    def __init__(self, pixels: int = 64, hidden: int = 32, latent: int = 4) -> None:
        super().__init__()
        self.pixels = pixels
        self.fc1 = nn.Linear(pixels, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, pixels)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The digits come as (image, label) pairs: runner calls ``model(images, labels)``; the label
        is not used."""
        mu, logvar = self.encode(x.view(-1, self.pixels))
        z = self.reparameterize(mu, logvar)
        recon = self.decode(z)
        return {"loss": vae_loss(recon, x, mu, logvar), "recon": recon, "mu": mu, "logvar": logvar}
