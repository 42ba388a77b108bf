"""Inference forward of a small randomly initialised ConvNeXt V2 backbone (its GRN layers normalise
each channel by its L2 norm over the spatial dims): batch 4 of 64x64 RGB images, 4 stages of one
block each."""

from __future__ import annotations

import torch
from transformers import ConvNextV2Config, ConvNextV2Model

torch.manual_seed(0)
CONFIG = ConvNextV2Config(
    num_channels=3,
    patch_size=4,
    num_stages=4,
    hidden_sizes=[16, 32, 64, 128],
    depths=[1, 1, 1, 1],
    image_size=64,
)
MODEL = ConvNextV2Model(CONFIG).eval()
PIXELS = torch.randn(4, 3, 64, 64)


def forward():
    with torch.no_grad():
        return MODEL(pixel_values=PIXELS).pooler_output


def test_convnextv2_backbone_forward(benchmark):
    pooled = benchmark(forward)
    assert pooled.shape == (4, 128)
