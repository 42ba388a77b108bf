"""Per-batch R^2 in a validation loop (torchmetrics functional user code)."""

from __future__ import annotations

import torch
from torchmetrics.functional import r2_score

torch.manual_seed(0)
BATCHES = []
for _ in range(64):
    target = torch.randn(256, 4)
    BATCHES.append((target + 0.3 * torch.randn(256, 4), target))


def _validate():
    return [r2_score(preds, target) for preds, target in BATCHES]


def test_r2_score_per_batch(benchmark):
    scores = benchmark(_validate)
    assert all(0.5 < float(s) < 1.0 for s in scores)
