"""Multi-head attention written with functional einops.rearrange, tiny shapes (call overhead
dominated)."""

from __future__ import annotations

import torch
from einops import rearrange

torch.manual_seed(0)
X = torch.randn(2, 16, 64)
W_QKV = torch.randn(64, 192) * 0.05
W_O = torch.randn(64, 64) * 0.05


def _attention_stack(x, depth=32, heads=4):
    for _ in range(depth):
        qkv = x @ W_QKV
        q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=heads)
        attn = (q @ k.transpose(-1, -2)).softmax(-1)
        x = x + rearrange(attn @ v, "b h n d -> b n (h d)") @ W_O
    return x


def test_rearrange_attention_stack(benchmark):
    out = benchmark(_attention_stack, X)
    assert out.shape == X.shape
