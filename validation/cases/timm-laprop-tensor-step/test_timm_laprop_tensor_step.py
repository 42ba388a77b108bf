"""One LaProp optimizer step over a small ViT with many small parameter tensors."""

from __future__ import annotations

import timm
import timm.optim
import torch

torch.manual_seed(0)
MODEL = timm.create_model(
    "vit_tiny_patch16_224",
    pretrained=False,
    img_size=32,
    patch_size=8,
    embed_dim=64,
    num_heads=2,
    depth=12,
    num_classes=10,
)
for _p in MODEL.parameters():
    _p.grad = torch.randn_like(_p) * 1e-2
OPT = timm.optim.create_optimizer_v2(MODEL, "laprop", lr=1e-3, weight_decay=0.05)


def test_laprop_step_small_vit(benchmark):
    benchmark(OPT.step)
    assert all(torch.isfinite(p).all() for p in MODEL.parameters())
