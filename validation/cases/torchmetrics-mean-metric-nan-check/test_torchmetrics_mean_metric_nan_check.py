"""MeanMetric accumulating per-sample losses over an epoch (torchmetrics user code)."""

from __future__ import annotations

import torch
from torchmetrics import MeanMetric

torch.manual_seed(0)
BATCH_LOSSES = [torch.rand(512) for _ in range(16)]


def _epoch(metric):
    for losses in BATCH_LOSSES:
        metric.update(losses)


def test_mean_metric_update(benchmark):
    metric = MeanMetric()
    benchmark(_epoch, metric)
    expected = float(torch.cat(BATCH_LOSSES).mean())
    assert abs(float(metric.compute()) - expected) < 1e-4
