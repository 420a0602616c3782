"""The example's own loop: dcgan/main.py's training loop on the digits, as it is written there
(``netD.zero_grad()``, ``errD_real.backward()``, ``optimizerD.step()``, ...), over the data in runner's
order (``randperm(seed + epoch)``). ``PYTHONPATH=examples/gan python examples/gan/gan/hand_loop.py``
prints its losses; runner's ``+experiment=gan`` trains exactly so (tests/test_example_gan.py)."""

import torch
from torch import optim
from torch.utils.data import DataLoader

from gan.models import DCGAN, FAKE, REAL, to_tanh_range
from runner.data import load_digits


def train_by_hand(
    steps: int, seed: int = 0, batch_size: int = 64, lr: float = 0.0002, beta1: float = 0.5, **sizes: int
) -> tuple[DCGAN, list[tuple[float, float]]]:
    """``steps`` iterations; the model and each step's (Loss_D, Loss_G)."""
    torch.manual_seed(seed)
    model = DCGAN(**sizes)
    net_g, net_d, criterion, nz = model.generator, model.discriminator, model.criterion, model.nz
    train_set, _ = load_digits()
    optimizer_d = optim.Adam(net_d.parameters(), lr=lr, betas=(beta1, 0.999))
    optimizer_g = optim.Adam(net_g.parameters(), lr=lr, betas=(beta1, 0.999))
    losses: list[tuple[float, float]] = []
    model.train()
    epoch = 0
    while len(losses) < steps:
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(seed + epoch))
        loader = DataLoader(train_set, batch_size, sampler=order.tolist(), generator=torch.Generator())
        for data in loader:
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            net_d.zero_grad()
            real_cpu = to_tanh_range(data[0])
            b_size = real_cpu.size(0)
            label = torch.full((b_size,), REAL, dtype=real_cpu.dtype)
            output = net_d(real_cpu)
            err_d_real = criterion(output, label)
            err_d_real.backward()
            noise = torch.randn(b_size, nz, 1, 1)
            fake = net_g(noise)
            label.fill_(FAKE)
            output = net_d(fake.detach())
            err_d_fake = criterion(output, label)
            err_d_fake.backward()
            err_d = err_d_real + err_d_fake
            optimizer_d.step()
            # (2) Update G network: maximize log(D(G(z)))
            net_g.zero_grad()
            label.fill_(REAL)
            output = net_d(fake)
            err_g = criterion(output, label)
            err_g.backward()
            optimizer_g.step()
            losses.append((err_d.item(), err_g.item()))
            if len(losses) == steps:
                break
        epoch += 1
    return model, losses


if __name__ == "__main__":  # 5 epochs of 23 steps: what +experiment=gan trains
    for step, (loss_d, loss_g) in enumerate(train_by_hand(115)[1], start=1):
        print(f"[{step}/115] Loss_D: {loss_d:.4f} Loss_G: {loss_g:.4f}")
