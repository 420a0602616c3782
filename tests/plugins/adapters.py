"""Test plug-in: a small "pretrained" classifier read from a file (as ``from_pretrained`` reads one),
fine-tuned with peft's LoRA, or with runner's ``freeze``."""

import torch
from torch import nn


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.flatten(images))))


def save_base(path: str, seed: int = 0) -> None:
    """The "pretrained" weights, in safetensors' format as the hubs keep them."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    save_file(Base().state_dict(), path)


def pretrained(path: str) -> Base:
    from safetensors.torch import load_file

    base = Base()
    base.load_state_dict(load_file(path))
    return base


def lora(path: str, rank: int = 2) -> nn.Module:
    """peft's LoRA on both layers: only the adapters train."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(pretrained(path), LoraConfig(r=rank, lora_alpha=4, target_modules=["fc1", "fc2"]))


def random_lora(rank: int = 2) -> nn.Module:
    """peft's LoRA on a base no file holds: its weights are drawn as the model is built."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(Base(), LoraConfig(r=rank, lora_alpha=4, target_modules=["fc1", "fc2"]))
