"""PearsonCorrCoef.update over an epoch of batches (torchmetrics user code)."""

from __future__ import annotations

import torch
from torchmetrics import PearsonCorrCoef

torch.manual_seed(0)
BATCHES = []
for _ in range(16):
    p = torch.randn(65_536)
    BATCHES.append((p, 0.5 * p + torch.randn(65_536)))


def _epoch(metric):
    for preds, target in BATCHES:
        metric.update(preds, target)


def test_pearson_corrcoef_update(benchmark):
    metric = PearsonCorrCoef()
    benchmark(_epoch, metric)
    assert 0.3 < float(metric.compute()) < 0.6
