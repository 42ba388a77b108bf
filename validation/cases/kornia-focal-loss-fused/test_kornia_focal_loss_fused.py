"""Focal loss on segmentation logits, as in a dense-prediction training step."""

from __future__ import annotations

import kornia
import torch

torch.manual_seed(0)
LOGITS = torch.randn(8, 10, 32, 32)
LABELS = torch.randint(0, 10, (8, 32, 32))


def test_focal_loss_segmentation(benchmark):
    loss = benchmark(kornia.losses.focal_loss, LOGITS, LABELS, 0.25, 2.0, "mean")
    assert torch.isfinite(loss)
