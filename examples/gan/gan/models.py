"""DCGAN's generator and discriminator as pytorch/examples writes them (dcgan/main.py), with fewer
layers for 8x8 images, and the model runner trains: both, with the example's step as its own."""

import math

import torch
from torch import nn

REAL, FAKE = 1.0, 0.0


def weights_init(module: nn.Module) -> None:
    """DCGAN's initialisation: N(0, 0.02) convolutions, N(1, 0.02) BatchNorm scales."""
    classname = module.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class Generator(nn.Module):
    """Noise (nz x 1 x 1) -> 4x4 -> an 8x8 image in [-1, 1]."""

    def __init__(self, nz: int, ngf: int, nc: int = 1) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return self.main(noise)


class Discriminator(nn.Module):
    """An 8x8 image -> 4x4 -> 2x2 -> the probability that it is real."""

    def __init__(self, ndf: int, nc: int = 1) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 2, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.main(images).view(-1, 1).squeeze(1)


def to_tanh_range(images: torch.Tensor) -> torch.Tensor:
    """The digits' [0, 1] pixels as DCGAN's Normalize((0.5,), (0.5,)) gives them: [-1, 1]."""
    return images * 2 - 1


class DCGAN(nn.Module):
    """Both networks, built in dcgan/main.py's order (G, then D, then the fixed noise it draws).
    ``training_step`` is the example's loop body; ``forward`` is what validation scores: D's loss on
    the real images and on G's images from the fixed noise (no random draw)."""

    def __init__(self, nz: int = 16, ngf: int = 16, ndf: int = 16, fixed_samples: int = 64) -> None:
        super().__init__()
        self.nz = nz
        self.generator = Generator(nz, ngf)
        self.generator.apply(weights_init)
        self.discriminator = Discriminator(ndf)
        self.discriminator.apply(weights_init)
        self.criterion = nn.BCELoss()
        self.register_buffer("fixed_noise", torch.randn(fixed_samples, nz, 1, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], step) -> dict[str, torch.Tensor]:
        """dcgan/main.py's step: (1) update D on real, then on fake; (2) update G to fool the new D."""
        real = to_tanh_range(batch[0])
        batch_size = real.size(0)
        label = torch.full((batch_size,), REAL, dtype=real.dtype, device=real.device)
        output = self.discriminator(real)
        loss_d_real = self.criterion(output, label)
        step.backward(loss_d_real, "discriminator")

        noise = torch.randn(batch_size, self.nz, 1, 1, device=real.device)
        fake = self.generator(noise)
        label.fill_(FAKE)
        output = self.discriminator(fake.detach())
        loss_d_fake = self.criterion(output, label)
        step.backward(loss_d_fake, "discriminator")
        step.update("discriminator")

        label.fill_(REAL)  # fake labels are real for the generator's cost
        output = self.discriminator(fake)
        loss_g = self.criterion(output, label)
        step.backward(loss_g, "generator")
        step.update("generator")
        return {"loss_d": loss_d_real + loss_d_fake, "loss_g": loss_g}

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        real = to_tanh_range(images)
        batch_size = real.size(0)
        repeats = math.ceil(batch_size / len(self.fixed_noise))
        fake = self.generator(self.fixed_noise.repeat(repeats, 1, 1, 1)[:batch_size])
        ones = torch.full((batch_size,), REAL, dtype=real.dtype, device=real.device)
        loss = self.criterion(self.discriminator(real), ones) + self.criterion(
            self.discriminator(fake), 1 - ones
        )
        return {"loss": loss}
