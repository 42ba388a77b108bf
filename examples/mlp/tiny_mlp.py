"""A user's model: a two-layer perceptron, its toy data and its training step.

Nothing here knows about pytest-hpml; only the tests next to it do.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

FEATURES = 16
CLASSES = 4


class TinyMLP(nn.Module):
    def __init__(self, features: int = FEATURES, hidden: int = 32, classes: int = CLASSES):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def toy_data(samples: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Points labelled by a fixed random linear map: a problem the MLP can learn exactly."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=generator)
    teacher = torch.randn(FEATURES, CLASSES, generator=generator)
    return x, (x @ teacher).argmax(dim=1)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    autocast: Any = None,
) -> float:
    """One optimizer step; the forward pass runs under ``autocast`` (a context manager) if given."""
    optimizer.zero_grad(set_to_none=True)
    with autocast if autocast is not None else contextlib.nullcontext():
        logits = model(x)
    # The loss in fp32, outside autocast, as mixed-precision training does.
    loss = nn.functional.cross_entropy(logits.float(), y)
    loss.backward()
    optimizer.step()
    return loss.item()
