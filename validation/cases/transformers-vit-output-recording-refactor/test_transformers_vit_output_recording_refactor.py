"""Inference forward of a small randomly initialised ViT image classifier (SDPA attention):
batch 8 of 64x64 RGB images, patch size 8 (64 patches + CLS), hidden size 96, 2 layers."""

from __future__ import annotations

import torch
from transformers import ViTConfig, ViTForImageClassification

torch.manual_seed(0)
CONFIG = ViTConfig(
    image_size=64,
    patch_size=8,
    num_channels=3,
    hidden_size=96,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_labels=10,
    attn_implementation="sdpa",
)
MODEL = ViTForImageClassification(CONFIG).eval()
PIXELS = torch.randn(8, 3, 64, 64)


def forward():
    with torch.no_grad():
        return MODEL(pixel_values=PIXELS).logits


def test_vit_image_classification_forward(benchmark):
    logits = benchmark(forward)
    assert logits.shape == (8, 10)
