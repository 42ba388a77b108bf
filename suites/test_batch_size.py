"""Batch size, as the book (ch. 2) and the MXNet talk teach it: a bigger batch means fewer
steps per epoch and more samples per second, and, at a fixed epoch count and learning rate, a
less accurate model (the book's CNN on Fashion-MNIST, 10 epochs on a CPU: batch 64 -> 148 s,
83.99%; 128 -> 96 s, 82.14%; 256 -> 76 s, 80.01%).

Checked: a DataLoader's steps per epoch are ceil(N/B), floor(N/B) with ``drop_last``, every
sample seen once; on the digits, 10 epochs at one learning rate leave the largest of the book's
batch sizes less accurate than the smallest and not the most accurate, deterministically.
Benchmarked: the training throughput of the book's CNN at batch sizes 16, 64 and 128, as the
time of one 128-sample "epoch" at each size, with the book's epoch-time ratio cited beside ours.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from suites.models import book_batch, book_cnn, digits, mlp, threads, train_step

BOOK_BATCHES = {64: (148, 83.99), 128: (96, 82.14), 256: (76, 80.01)}  # seconds, accuracy %
BOOK_SOURCE = (
    "book ch. 2: CNN on Fashion-MNIST, CPU, 10 epochs: batch 64/128/256 -> "
    "148/96/76 s, 83.99/82.14/80.01%"
)


DIGITS = 1797  # scikit-learn's digits: the dataset the loader tests draw their samples from


def epoch(n: int, batch_size: int, drop_last: bool) -> list[torch.Tensor]:
    """The index column of each batch of one shuffled epoch over the first ``n`` digits."""
    features, labels = digits()
    dataset = TensorDataset(torch.arange(n), features[:n], labels[:n])
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(0),
    )
    batches = [index for index, _, _ in loader]
    assert len(loader) == len(batches)  # what a training loop's progress bar is told
    return batches


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, DIGITS),
    batch_size=st.integers(1, 300),
    drop_last=st.booleans(),
)
def test_steps_per_epoch_are_ceil_n_over_b_or_floor_with_drop_last(
    n: int, batch_size: int, drop_last: bool
) -> None:
    batches = epoch(n, batch_size, drop_last)
    full, rest = divmod(n, batch_size)
    assert len(batches) == (full if drop_last else math.ceil(n / batch_size))
    sizes = [len(b) for b in batches]
    assert sizes[:full] == [batch_size] * full
    if not drop_last and rest:
        assert sizes[-1] == rest
    seen = torch.cat(batches) if batches else torch.empty(0, dtype=torch.long)
    assert len(set(seen.tolist())) == len(seen) == (full * batch_size if drop_last else n)


@pytest.mark.parametrize(("batch_size", "steps"), [(64, 938), (128, 469), (256, 235)])
def test_a_fashion_mnist_epoch_has_fewer_steps_at_bigger_batches(
    batch_size: int, steps: int
) -> None:
    # The book's 60,000 training images: why a bigger batch finishes an epoch sooner.
    loader = DataLoader(TensorDataset(torch.zeros(60_000, 1)), batch_size=batch_size)
    assert len(loader) == steps


def digits_accuracy(batch_size: int, epochs: int = 10, lr: float = 0.1, seed: int = 0) -> float:
    """Test accuracy of :func:`mlp` trained with SGD on 80% of the digits."""
    features, labels = digits()
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(order))
    train, test = order[:cut], order[cut:]
    model = mlp(seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(
        TensorDataset(features[train], labels[train]),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    # One thread: the same sums in the same order everywhere, and far faster for a 64-32-10
    # MLP than threads waiting on each other (18 s with two threads on the loaded 2-core VM).
    with threads(1):
        for _ in range(epochs):
            for x, y in loader:
                train_step(model, optimizer, x, y)
        with torch.no_grad():
            return (model(features[test]).argmax(1) == labels[test]).float().mean().item()


def test_the_largest_batch_is_not_the_most_accurate_at_fixed_epochs_and_lr(benchmark: Any) -> None:
    # The book's batch sizes, epochs (10) and one learning rate for all: fewer, larger steps
    # make less progress per epoch. Deterministic: seeded split, weights and shuffling.
    accuracy = {b: digits_accuracy(b) for b in BOOK_BATCHES}
    largest = max(accuracy)
    assert digits_accuracy(largest) == accuracy[largest]  # a rerun gives the same number
    assert accuracy[largest] < max(accuracy.values()), accuracy
    assert accuracy[min(accuracy)] > accuracy[largest], accuracy
    for b, value in accuracy.items():  # kept in the baselines; the book's figures beside them
        name = f"accuracy[b{b}]"
        # Relative 3%: another CPU's rounding may flip a few of the 360 test digits.
        benchmark.record(
            name, round(100 * value, 2), unit="%", tolerance=0.03, higher_is_worse=False
        )
        benchmark.cite(name, BOOK_BATCHES[b][1], BOOK_SOURCE)


# Every variant trains on the same 128 samples (8 steps of 16, 2 of 64, 1 of 128): its time is
# an epoch's, so samples/s = 128 / time, and the speed-ups are the book's epoch-time ratios,
# except that the book's epochs include its DataLoader and these are the training steps alone.
# A small batch, then the book's 64 and 128; not 256 too: at least 5 rounds are measured, and
# under other jobs' load on the 2-core VM 256-sample epochs at 16, 64 and 256 took 24 s.
EPOCH_SAMPLES = 128
BATCH_SIZES = (16, 64, 128)
# Derived from the medians and recorded as one number each: only a collapse should count.
THROUGHPUT_TOLERANCE = 0.5


def epoch_of_steps(batch_size: int, device: torch.device) -> Callable[[], None]:
    model = book_cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    images, labels = book_batch(EPOCH_SAMPLES)
    batches = list(zip(images.to(device).split(batch_size), labels.to(device).split(batch_size)))

    def run() -> None:
        for x, y in batches:
            train_step(model, optimizer, x, y)

    return run


# Absolute epoch times judged at 30%: on the shared 2-core VM, training steps of a convolution
# network drift between sessions by more than any reference workload follows (b128's epoch:
# 57.9 ms recorded, 68.3 ms in a compare run the next day, +18%; fresh processes minutes apart
# differ by 15%). The in-run speed-ups are the sharper signal.
@pytest.mark.hpml_bench(threshold=0.3)
def test_training_throughput_by_batch_size(benchmark: Any, device: torch.device) -> None:
    targets = {f"b{b}": epoch_of_steps(b, device) for b in BATCH_SIZES}
    series = benchmark.variants(targets, baseline="b64")
    if benchmark.disabled:
        return
    for b in BATCH_SIZES:
        benchmark.record(
            f"throughput[b{b}]",
            round(EPOCH_SAMPLES / series[f"b{b}"].median, 1),
            unit="samples/s",
            tolerance=THROUGHPUT_TOLERANCE,
            portable=False,
            higher_is_worse=False,
        )
    book = {b: seconds for b, (seconds, _) in BOOK_BATCHES.items()}
    for b in BATCH_SIZES:
        if b != 64 and b in book:
            benchmark.cite(f"speedup[b{b}/b64]", round(book[64] / book[b], 2), BOOK_SOURCE)
