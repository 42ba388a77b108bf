"""Forward of timm's ViT Attention layer on a small token batch."""

from __future__ import annotations

import torch
from timm.layers import Attention

torch.manual_seed(0)
ATTN = Attention(192, num_heads=3, qkv_bias=True).eval()
X = torch.randn(8, 65, 192)


def _forward(x):
    with torch.no_grad():
        return ATTN(x)


def test_vit_attention_forward(benchmark):
    out = benchmark(_forward, X)
    assert out.shape == X.shape
