"""Per-pixel MulticlassAccuracy (macro) for segmentation logits (torchmetrics user code)."""

from __future__ import annotations

import torch
from torchmetrics.classification import MulticlassAccuracy

torch.manual_seed(0)
LOGITS = torch.randn(4, 8, 128, 128)
TARGET = torch.randint(0, 8, (4, 128, 128))


def test_multiclass_accuracy_update(benchmark):
    metric = MulticlassAccuracy(num_classes=8, average="macro")
    benchmark(metric.update, LOGITS, TARGET)
    assert 0.05 < float(metric.compute()) < 0.25
