"""pytorch/examples' variational autoencoder (``vae/main.py``), plugged into runner on its 8x8 digits:
the model, with its own summed loss; the recipe is runner's config (``conf/experiment/vae.yaml``)."""

from vae.model import VAE, vae_loss

__all__ = ["VAE", "vae_loss"]
