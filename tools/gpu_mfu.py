"""The ``mfu`` metric on a GPU: an 8192x8192x8192 bf16 matmul benchmarked through pytest-hpml.

Run by ``tools/gpu_check.sh`` (its ``mfu`` step) with a report file; by hand:

    pytest tools/gpu_mfu.py --hpml-device=cuda --hpml-baseline=off --hpml-report=mfu.json

The summary's table shows ``mfu`` (and ``flop_rate``); on a GPU the table of peaks lacks,
it says so and how to give the peak (``--hpml-peak-flops``). Not collected by a plain
``pytest`` (``testpaths`` are ``tests`` and ``suites``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

N = 8192


@pytest.mark.gpu
@pytest.mark.device("cuda")
def test_matmul_bf16_8192(benchmark: Any, device: torch.device) -> None:
    a, b = (torch.randn(N, N, device=device, dtype=torch.bfloat16) for _ in range(2))
    benchmark.track()  # FLOPs and FLOP/s beside the work counters' flops[bfloat16]
    benchmark(torch.matmul, a, b)
