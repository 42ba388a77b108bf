"""Dice loss on segmentation logits with default arguments, as in a training step."""

from __future__ import annotations

import kornia
import torch

torch.manual_seed(0)
LOGITS = torch.randn(8, 10, 32, 32)
LABELS = torch.randint(0, 10, (8, 32, 32))


def test_dice_loss_default_args(benchmark):
    loss = benchmark(kornia.losses.dice_loss, LOGITS, LABELS)
    assert torch.isfinite(loss)
