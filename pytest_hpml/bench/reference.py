"""The reference workload: a fixed small training step timed before each round, so that times
from two processes can be compared (Note [Reference workload] in docs/notes.md)."""

from __future__ import annotations

from typing import Any, Callable

from .measure import Timer


class Reference:
    """A fixed small training step on a device: convolution, matmul and a tiny MLP, forward
    and backward.

    Timed just before each round, it measures how fast this process runs right now (shared
    cores, frequency, neighbours), so that times from two processes can be compared (Note
    [Reference workload]).
    """

    repeat = 1

    def __init__(self, device: Any = None, sync: Callable[[], None] = lambda: None) -> None:
        import torch

        gen = torch.Generator().manual_seed(0)
        device = torch.device(device or "cpu")

        def weight(*shape: int) -> Any:
            return (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(device)

        self.images = torch.randn(2, 3, 32, 32, generator=gen).to(device)
        self.inputs = torch.randn(64, 128, generator=gen).to(device)
        self.square = weight(192, 192)
        self.params = [
            weight(8, 3, 3, 3).requires_grad_(),
            weight(10, 8 * 32 * 32).requires_grad_(),
            weight(128, 128).requires_grad_(),
            weight(10, 128).requires_grad_(),
        ]
        self.sync = sync

    def step(self) -> None:
        import torch.nn.functional as F

        conv, head, hidden, out = self.params
        for _ in range(2):
            features = F.conv2d(self.images, conv, padding=1).relu().flatten(1)
            F.linear(features, head).sum().backward()
            (self.square @ self.square).sum()
            F.linear(F.linear(self.inputs, hidden).relu(), out).sum().backward()
        for param in self.params:
            param.grad = None

    def time(self, timer: Timer) -> float:
        start = timer()
        for _ in range(self.repeat):
            self.step()
        self.sync()
        return timer() - start
