"""Optimizer builders of one's own that ask for the parameters' names or the model (test plug-in)."""

import torch


def head_faster(named_parameters, lr: float, head_lr: float, **options) -> torch.optim.Optimizer:
    """SGD with the parameters of the last layer (``3.*`` in runner's MLP) at their own rate."""
    head = [p for name, p in named_parameters if name.startswith("3.")]
    rest = [p for name, p in named_parameters if not name.startswith("3.")]
    return torch.optim.SGD([{"params": rest}, {"params": head, "lr": head_lr}], lr=lr, **options)


def over_the_model(model, lr: float, **options) -> torch.optim.Optimizer:
    return torch.optim.SGD(model[-1].parameters(), lr=lr, **options)
