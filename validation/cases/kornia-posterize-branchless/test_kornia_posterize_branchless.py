"""A RandAugment-style posterize of a float image batch with a fixed bit depth."""

from __future__ import annotations

import kornia
import torch

torch.manual_seed(0)
IMAGES = torch.rand(8, 3, 64, 64)


def test_posterize_fixed_bits(benchmark):
    out = benchmark(kornia.enhance.posterize, IMAGES, 3)
    assert out.shape == IMAGES.shape
