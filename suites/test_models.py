"""The shared models of ``suites/models.py`` are the ones the sources describe: the book's CNN
has the parameter counts the book prints (chapter 2: Fashion-MNIST, with and without biases;
chapter 6: CIFAR-10), and every model's weights depend only on its seed.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from suites.models import book_cnn


@pytest.mark.parametrize(
    ("channels", "size", "bias", "params"),
    [
        (1, 28, True, 1_630_090),  # ch. 2 and 6: Fashion-MNIST
        (3, 32, True, 2_122_186),  # ch. 6: CIFAR-10, before pruning
        (1, 28, False, 1_629_472),  # ch. 2: bias=False
    ],
    ids=["fashion-mnist", "cifar10", "fashion-mnist-no-bias"],
)
def test_book_cnn_has_the_books_parameter_count(
    channels: int, size: int, bias: bool, params: int
) -> None:
    model = book_cnn(channels=channels, size=size, bias=bias)
    assert sum(p.numel() for p in model.parameters()) == params
    logits = model(torch.zeros(2, channels, size, size))
    assert logits.shape == (2, 10)


def test_book_cnn_without_bias_drops_the_bias_of_every_layer() -> None:
    # 1,630,090 - 1,629,472 = 618 = 32 + 64 + 512 + 10: all four biases, no fewer.
    with_bias, without = book_cnn(), book_cnn(bias=False)
    weighted = (nn.Conv2d, nn.Linear)
    layers = [name for name, m in with_bias.named_modules() if isinstance(m, weighted)]
    assert layers == ["conv1", "conv2", "fc1", "fc2"]
    assert all(getattr(without, name).bias is None for name in layers)
    dropped = sum(getattr(with_bias, name).bias.numel() for name in layers)
    assert dropped == 1_630_090 - 1_629_472


def test_book_cnn_weights_depend_only_on_the_seed() -> None:
    torch.manual_seed(123)  # the global RNG must not matter
    first = book_cnn(seed=3).state_dict()
    torch.rand(10)
    second = book_cnn(seed=3).state_dict()
    other = book_cnn(seed=4).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["fc1.weight"], other["fc1.weight"])
