"""Tests of tiny_mlp written against pytest-hpml's public fixtures and markers.

Each test taking ``device`` and ``precision`` runs once per selected pair, e.g.
``test_matches_fp32_cpu_reference[cuda-bf16]``; select with ``--hpml-device`` and
``--hpml-precision`` (this project's default precisions are set in pyproject.toml).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from tiny_mlp import CLASSES, TinyMLP, toy_data, train_step

from pytest_hpml import CompileBackend, Precision


def setup_training(device: torch.device, lr: float = 0.5) -> tuple[Any, ...]:
    """A fresh model, its SGD optimizer and the toy data, all on ``device``."""
    model = TinyMLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = toy_data()
    return model, optimizer, x.to(device), y.to(device)


def test_gives_one_logit_per_class(device: torch.device, precision: Precision) -> None:
    model = TinyMLP().to(device)
    x, _ = toy_data(samples=8)
    with precision.autocast():
        logits = model(x.to(device))
    assert logits.shape == (8, CLASSES)
    assert logits.dtype == precision.dtype  # float32 for fp32, the autocast dtype otherwise


def test_matches_fp32_cpu_reference(device: torch.device, precision: Precision) -> None:
    model = TinyMLP()
    x, _ = toy_data(samples=32)
    expected = model(x)  # fp32 on the CPU
    moved = copy.deepcopy(model).to(device)
    with precision.autocast():
        actual = moved(x.to(device))
    precision.assert_close(actual, expected)  # tolerances chosen for the precision


def test_training_reduces_loss(device: torch.device, precision: Precision) -> None:
    model, optimizer, x, y = setup_training(device)
    losses = [train_step(model, optimizer, x, y, precision.autocast()) for _ in range(20)]
    assert losses[-1] < 0.7 * losses[0]


def test_compiled_model_matches_eager(device: torch.device, backend: CompileBackend) -> None:
    # With the default backend (eager) this compiles nothing; try --hpml-backend=inductor.
    model = TinyMLP().to(device)
    x = toy_data(samples=32)[0].to(device)
    torch.testing.assert_close(backend.compile(model)(x), model(x))


@pytest.mark.precision("bf16")
def test_bf16_training_keeps_fp32_weights(device: torch.device, precision: Precision) -> None:
    model, optimizer, x, y = setup_training(device)
    train_step(model, optimizer, x, y, precision.autocast())
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.device("cuda")
@pytest.mark.gpu(memory_gb=2)
def test_large_batch_step_stays_under_256_mib(device: torch.device) -> None:
    model = TinyMLP().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = toy_data(samples=1 << 16)
    x, y = x.to(device), y.to(device)
    torch.cuda.reset_peak_memory_stats(device)
    train_step(model, optimizer, x, y)
    assert torch.cuda.max_memory_allocated(device) < 256 * 2**20


@pytest.mark.slow
def test_learns_the_toy_problem(device: torch.device) -> None:
    model, optimizer, x, y = setup_training(device)
    for _ in range(300):
        train_step(model, optimizer, x, y)
    accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    assert accuracy > 0.95


def test_train_step_speed(benchmark: Any, device: torch.device, precision: Precision) -> None:
    model, optimizer, x, y = setup_training(device, lr=0.01)
    # train_step ends in loss.item(), which waits for the GPU: each round times the whole step.
    loss = benchmark(lambda: train_step(model, optimizer, x, y, precision.autocast()))
    assert loss == loss, "the loss became NaN"
