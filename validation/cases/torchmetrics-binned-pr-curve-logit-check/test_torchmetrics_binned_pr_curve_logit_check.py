"""Binned BinaryAveragePrecision accumulated over validation batches (torchmetrics user code)."""

from __future__ import annotations

import torch
from torchmetrics.classification import BinaryAveragePrecision

torch.manual_seed(0)
TARGET = torch.randint(0, 2, (5_000,))
PREDS = (0.3 * TARGET + 0.7 * torch.rand(5_000)).clamp(0, 1)


def test_binary_average_precision_binned_update(benchmark):
    metric = BinaryAveragePrecision(thresholds=100)
    benchmark(metric.update, PREDS, TARGET)
    assert 0.5 < float(metric.compute()) <= 1.0
