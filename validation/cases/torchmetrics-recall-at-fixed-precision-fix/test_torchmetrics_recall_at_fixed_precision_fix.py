"""Recall at a fixed precision on an unbinned validation set (torchmetrics user code)."""

from __future__ import annotations

import torch
from torchmetrics.functional.classification import binary_recall_at_fixed_precision

torch.manual_seed(0)
TARGET = torch.randint(0, 2, (4000,))
PREDS = (0.3 * TARGET + 0.7 * torch.rand(4000)).clamp(0, 1)


def test_binary_recall_at_fixed_precision(benchmark):
    recall, _threshold = benchmark(
        binary_recall_at_fixed_precision, PREDS, TARGET, min_precision=0.8
    )
    assert 0.0 < float(recall) <= 1.0
