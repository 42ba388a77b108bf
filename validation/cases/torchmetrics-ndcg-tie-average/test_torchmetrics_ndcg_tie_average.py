"""RetrievalNormalizedDCG over a validation set of queries (torchmetrics user code)."""

from __future__ import annotations

import torch
from torchmetrics.retrieval import RetrievalNormalizedDCG

torch.manual_seed(0)
N_QUERIES, DOCS = 200, 50
INDEXES = torch.arange(N_QUERIES).repeat_interleave(DOCS)
PREDS = torch.rand(N_QUERIES * DOCS)
TARGET = torch.randint(0, 2, (N_QUERIES * DOCS,))


def _evaluate(metric):
    metric.reset()
    metric.update(PREDS, TARGET, indexes=INDEXES)
    return metric.compute()


def test_retrieval_ndcg_compute(benchmark):
    metric = RetrievalNormalizedDCG()
    result = benchmark(_evaluate, metric)
    assert 0.0 < float(result) <= 1.0
