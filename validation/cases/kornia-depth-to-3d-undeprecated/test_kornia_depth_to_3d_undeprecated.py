"""Back-project a depth map to a 3D point map with pinhole intrinsics."""

from __future__ import annotations

import torch
from kornia.geometry.depth import depth_to_3d

torch.manual_seed(0)
DEPTH = torch.rand(1, 1, 120, 160) * 10.0
K = torch.tensor([[[200.0, 0.0, 80.0], [0.0, 200.0, 60.0], [0.0, 0.0, 1.0]]])


def test_depth_to_3d_point_map(benchmark):
    points = benchmark(depth_to_3d, DEPTH, K)
    assert points.shape == (1, 3, 120, 160)
