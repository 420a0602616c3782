"""pytorch/examples' DCGAN (dcgan/main.py), shrunk to runner's bundled 8x8 digits: two optimizers
and a training step the model writes (``DCGAN.training_step``), and the example's own hand loop
(``hand_loop.py``) that it trains exactly as."""

from gan.models import DCGAN

__all__ = ["DCGAN"]
