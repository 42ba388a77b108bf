"""Models and data shared by every regression suite, kept in one place so that suites agree.

Everything here is tiny on purpose: the suites run on a 2-core CPU in CI, fp16 autocast on a
CPU is slow, and a suite checks behaviour, not speed; only the benchmarks' models,
:func:`linear_stack` and the book's CNN :func:`book_cnn`, have millions of parameters. Weights
and data come from their own seeds, so a reference computed in one place equals the one
computed in another whatever the test did to the global RNG before.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from pytest_hpml.hardware.torch_state import threads_set

IMAGE_SHAPE = (3, 16, 16)
CLASSES = 10


class TinyCNN(nn.Module):
    """Two convolutions, pooling and a linear head: the op kinds autocast treats differently."""

    def __init__(self, channels: int = IMAGE_SHAPE[0], classes: int = CLASSES, width: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, kernel_size=3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.conv1(images))
        hidden = torch.relu(self.conv2(hidden))
        return self.fc(self.pool(hidden).flatten(1))


def tiny_cnn(seed: int = 0) -> TinyCNN:
    """A :class:`TinyCNN` on the CPU whose weights depend only on ``seed``."""
    # fork_rng(devices=[]) leaves the CUDA generators alone: touching them would create a
    # CUDA context in the pytest process.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyCNN()


def image_batch(batch_size: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random CPU images of :data:`IMAGE_SHAPE` and integer labels below :data:`CLASSES`."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, *IMAGE_SHAPE, generator=generator)
    labels = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    return images, labels


@functools.cache
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled 8x8 digits (1,797 images, no download): standardized pixels and
    their labels, flat (64 features).

    Loaded once per process (reading the file costs ~0.1 s and many tests train on it): the
    tensors are shared, so index, view or copy them, never change them in place.
    """
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    x = torch.tensor(features, dtype=torch.float32)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)  # some pixels are always 0
    return x, torch.tensor(labels)


def mlp(inputs: int = 64, hidden: int = 32, classes: int = CLASSES, seed: int = 0) -> nn.Module:
    """A one-hidden-layer MLP on the CPU whose weights depend only on ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def digits_cnn(seed: int = 0) -> nn.Sequential:
    """A small CNN for :func:`digits` viewed as 1x8x8 images, on the CPU, weights from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(16 * 4 * 4, 10),
        )


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """One plain training step: zero the gradients, cross-entropy forward, backward, update.
    Returns the loss, detached."""
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


def linear_stack(width: int = 512, depth: int = 16, seed: int = 0) -> nn.Module:
    """``depth`` Linear(width, width) layers with ReLUs: 16 x 512 is 4.2M parameters in 32
    tensors, the many-tensors shape where an optimizer's per-tensor overhead shows."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        return nn.Sequential(*layers[:-1])


def book_cnn(channels: int = 1, size: int = 28, bias: bool = True, seed: int = 0) -> nn.Sequential:
    """The book's CNN (chapters 2, 6 and 9), on the CPU, whose weights depend only on ``seed``.

    Conv2d(C, 32, 3, padding=1) → ReLU → MaxPool2d(2) → Conv2d(32, 64, 3, padding=1) → ReLU →
    MaxPool2d(2) → Flatten → Linear(64·(size/4)², 512) → Linear(512, 10), with no ReLU between
    the two linears, as the book lists it. Parameters: 1,630,090 for 1x28x28 (Fashion-MNIST),
    2,122,186 for 3x32x32 (CIFAR-10). ``bias=False`` drops the bias of all four layers
    (32 + 64 + 512 + 10 = 618 parameters, the only subset of biases that sums to the book's
    cut): 1,629,472 for 1x28x28. Layers are named (``conv1``, ``fc1``...) for pruning tools.
    """
    if size % 4:
        raise ValueError(f"size must be a multiple of 4 (two 2x2 poolings), got {size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            OrderedDict(
                conv1=nn.Conv2d(channels, 32, kernel_size=3, padding=1, bias=bias),
                relu1=nn.ReLU(),
                pool1=nn.MaxPool2d(2),
                conv2=nn.Conv2d(32, 64, kernel_size=3, padding=1, bias=bias),
                relu2=nn.ReLU(),
                pool2=nn.MaxPool2d(2),
                flatten=nn.Flatten(),
                fc1=nn.Linear(64 * (size // 4) ** 2, 512, bias=bias),
                fc2=nn.Linear(512, CLASSES, bias=bias),
            )
        )


def book_batch(
    batch_size: int = 32, channels: int = 1, size: int = 28, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random CPU images shaped like the book's data (1x28x28 Fashion-MNIST by default, 3x32x32
    CIFAR-10 with ``channels=3, size=32``) and labels below :data:`CLASSES`, for
    :func:`book_cnn`."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, channels, size, size, generator=generator)
    labels = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    return images, labels


threads = threads_set  # torch's intra-op threads set inside a ``with``, restored after
