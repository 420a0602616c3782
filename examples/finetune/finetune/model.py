"""A classifier as fine-tuning finds one: ``backbone`` (blocks of Linear, LayerNorm, ReLU) and a linear
``head``. With ``pretrained`` it starts from a saved backbone's weights (a state dict, loaded as
tensors only); without, from its initialisation under the run's seed."""

import math
from pathlib import Path

import torch
from torch import nn


class Backbone(nn.Sequential):
    def __init__(self, inputs: int, width: int, blocks: int) -> None:
        layers = []
        for index in range(blocks):
            layers.append(
                nn.Sequential(
                    nn.Linear(inputs if index == 0 else width, width), nn.LayerNorm(width), nn.ReLU()
                )
            )
        super().__init__(*layers)


class Classifier(nn.Module):
    def __init__(self, inputs: int, num_outputs: int, width: int, blocks: int) -> None:
        super().__init__()
        self.backbone = Backbone(inputs, width, blocks)
        self.head = nn.Linear(width, num_outputs)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(images.flatten(1)))


def classifier(
    input_shape: list[int], num_outputs: int, width: int = 64, blocks: int = 3, pretrained: str | None = None
) -> Classifier:
    model = Classifier(math.prod(input_shape), num_outputs, width, blocks)
    if pretrained is not None:
        model.backbone.load_state_dict(torch.load(Path(pretrained), weights_only=True))
    return model
