"""Forward of a small token-mixing MLP built from einops Rearrange layers (layer overhead
dominated)."""

from __future__ import annotations

import torch
from einops.layers.torch import Rearrange
from torch import nn

torch.manual_seed(0)


def _block(d, n):
    return nn.Sequential(
        Rearrange("b n (h d) -> b h n d", h=4),
        Rearrange("b h n d -> b n (h d)"),
        Rearrange("b n c -> b c n"),
        nn.Linear(n, n),
        Rearrange("b c n -> b n c"),
    )


MODEL = nn.Sequential(
    Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=4, p2=4),
    nn.Linear(48, 32),
    *[_block(32, 16) for _ in range(64)],
).eval()
X = torch.randn(2, 3, 16, 16)


def _forward(x):
    with torch.no_grad():
        return MODEL(x)


def test_rearrange_layer_mixer_forward(benchmark):
    out = benchmark(_forward, X)
    assert out.shape == (2, 16, 32)
