"""Convert a batch of HSV images back to RGB (e.g. after a hue/saturation edit)."""

from __future__ import annotations

import math

import kornia
import torch

torch.manual_seed(0)
HSV = torch.rand(8, 3, 64, 64)
HSV[:, 0] *= 2 * math.pi


def test_hsv_to_rgb_batch(benchmark):
    out = benchmark(kornia.color.hsv_to_rgb, HSV)
    assert out.shape == HSV.shape
