"""The worked example in examples/vae/: pytorch/examples' VAE on the digits trains bit for bit as its own
loop, whatever the validation cadence: its forward samples noise in eval mode too, and runner's own
forwards (the first-batch check, validation) leave every random state as they found it."""

import pytest
import torch
from conftest import REPO, read_scalars

from runner.data import load_digits
from runner.training.seeding import seed_everything

EXAMPLE = REPO / "examples" / "vae"
EXPERIMENT = (f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "+experiment=vae")
EPOCHS, BATCH_SIZE = 2, 128


@pytest.fixture
def train_example(train_here, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return lambda *overrides: train_here(*EXPERIMENT, *overrides)


def reference_loop(seed: int = 0) -> tuple[list[float], dict[str, torch.Tensor]]:
    """pytorch/examples' train(): the summed loss backward, Adam at 1e-3, each step's loss printed per
    sample; no validation. The data order is runner's (randperm(seed + epoch)) and so are the seeds."""
    from vae import VAE
    from vae.model import vae_loss

    seed_everything(seed)
    model = VAE(pixels=64, hidden=32, latent=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_set, _ = load_digits()
    losses = []
    model.train()
    for epoch in range(EPOCHS):
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        for start in range(0, len(order), BATCH_SIZE):
            data = torch.stack([train_set[index][0] for index in order[start : start + BATCH_SIZE]])
            optimizer.zero_grad()
            outputs = model(data)
            recon_batch, mu, logvar = outputs["recon"], outputs["mu"], outputs["logvar"]
            loss = vae_loss(recon_batch, data, mu, logvar)
            loss.backward()
            optimizer.step()
            losses.append(loss.item() / len(data))
    return losses, model.state_dict()


@pytest.mark.parametrize(
    ("val_every_n_epochs", "callbacks"),
    [("1", "none"), ("null", "none"), ("1", "[early_stopping,ema]")],  # EMA: validations of its own weights
)
def test_the_vae_trains_as_its_own_loop_whatever_the_validation_cadence(
    train_example, caplog, val_every_n_epochs, callbacks
):
    run_dir = train_example(
        f"trainer.max_epochs={EPOCHS}", "trainer.log_every_n_steps=1",
        f"trainer.val_every_n_epochs={val_every_n_epochs}", f"callbacks={callbacks}",
    )  # fmt: skip
    losses, weights = reference_loop()
    scalars = read_scalars(run_dir)
    assert [value for _, value in scalars["train/loss"]] == pytest.approx(losses, rel=1e-6)  # per sample
    validations = [step for step, _ in scalars["val/loss"]]
    steps = len(losses)
    assert validations == ([steps // EPOCHS, steps] if val_every_n_epochs == "1" else [steps])
    trained = torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"]
    for name, value in weights.items():
        assert torch.equal(trained[name], value), name
    assert "(loss=from_model); a sum over samples: accumulated as one, logged" in caplog.text  # the run plan
