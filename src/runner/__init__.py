"""runner: a config-driven PyTorch experiment runner."""

__version__ = "0.1.0"
