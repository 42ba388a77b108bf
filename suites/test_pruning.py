"""Model simplification with NNI, as the book (ch. 6) teaches it: ``L1NormPruner`` masks the
convolution filters with the smallest L1 norms, and only NNI's ``ModelSpeedup`` then removes them;
the book's CIFAR-10 CNN (2,122,186 parameters) pruned at 50% has 1,059,306, and trains faster
(122 s -> 89 s, 1.37x; 76 s, 1.61x at 80%) at some cost in accuracy (47.10% -> 42.71%; 38.87%
at 80%, accuracy not falling monotonically with sparsity).

Checked, with nni 3.0 through ``pytest_hpml.prune`` (``ModelSpeedup`` on a ``torch.fx`` trace:
NNI's own tracer fails on this torch): the exact 1,059,306; parameters and counted FLOPs falling
strictly from 10% to 80% sparsity; masks alone keeping size and cost and zeroing exactly the
smallest-L1 filters; the sped-up model computing what the masked one computes, output shape
unchanged; resnet18 (torchvision, no weights) shrinking and still training; the book's CNN on
the digits losing little accuracy once pruned and briefly fine-tuned. Benchmarked: a training
step of the dense CNN against the 50% and 80% pruned ones, as speed-ups measured in one run,
with the book's ratios cited beside them. Here, for training steps alone on one thread, the
speed-ups are larger than the book's (about 2.3x and 4.6x on the 2-core VM): the book timed
whole training runs, data loading included, which pruning does not shorten.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable

import pytest
import torch
from torch import nn

from pytest_hpml import Footprint, assert_shrinks, prune
from suites.models import book_batch, book_cnn, digits, threads, train_step

pytest.importorskip("nni", reason="the pruning suite needs nni (pip install nni)")

BOOK_PARAMS = 2_122_186  # the book's CNN on 3x32x32 (CIFAR-10)
BOOK_PRUNED_PARAMS = 1_059_306  # after 50% L1 pruning of its convolutions and ModelSpeedup
SPARSITIES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# NNI runs the model on these to find what to remove; FLOPs are counted on them too.
EXAMPLE = book_batch(8, channels=3, size=32)[0]


def one_thread_prune(model: nn.Module, sparsity: float, inputs: Any, **kwargs: Any) -> nn.Module:
    """``prune`` on one thread: NNI's speed-up works on many small tensors, where torch's threads
    only wait on one another (resnet18 on the loaded 2-core VM: 9.2 s on two threads, 4.7 s on
    one)."""
    with threads(1):
        return prune(model, sparsity, inputs, **kwargs)


@functools.cache
def pruned_cnn(sparsity: float, speed_up: bool = True) -> nn.Module:
    """The book's CIFAR CNN (seed 0) with ``sparsity`` of its convolution filters pruned by L1
    norm: sped up, or masked only. Cached per process (benchmarks rerun in fresh processes):
    callers copy it before changing it."""
    return one_thread_prune(book_cnn(channels=3, size=32), sparsity, EXAMPLE, speed_up=speed_up)


def conv_widths(model: nn.Module) -> list[int]:
    return [m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d)]


def test_book_cnn_pruned_at_50_percent_has_exactly_1_059_306_parameters() -> None:
    dense = book_cnn(channels=3, size=32)
    pruned = pruned_cnn(0.5)
    assert Footprint.of(dense).params == BOOK_PARAMS
    assert Footprint.of(pruned).params == BOOK_PRUNED_PARAMS
    # Half the filters of each convolution, and half the inputs of the first linear layer.
    assert conv_widths(pruned) == [16, 32]
    assert pruned.fc1.in_features == 32 * 8 * 8


def test_parameters_and_flops_fall_strictly_with_sparsity(benchmark: Any) -> None:
    dense = Footprint.of(book_cnn(channels=3, size=32), EXAMPLE)
    footprints = [Footprint.of(pruned_cnn(s), EXAMPLE) for s in SPARSITIES]
    params = [dense.params] + [f.params for f in footprints]
    flops = [dense.flops] + [f.flops for f in footprints]
    assert all(a > b for a, b in zip(params, params[1:])), params
    assert all(a > b for a, b in zip(flops, flops[1:])), flops
    # Kept in the baselines: a change in NNI's choices shows as a changed count.
    for sparsity, footprint in zip(SPARSITIES, footprints):
        benchmark.record(f"params[pruned{round(sparsity * 100)}]", footprint.params)
        benchmark.record(f"flops[pruned{round(sparsity * 100)}]", footprint.flops, unit="FLOP")


def test_masks_alone_keep_size_and_cost_and_zero_the_smallest_l1_filters() -> None:
    dense = book_cnn(channels=3, size=32)
    masked = pruned_cnn(0.5, speed_up=False)
    with pytest.raises(AssertionError, match=r"did not shrink enough in params, bytes, flops"):
        assert_shrinks(dense, masked, example_inputs=EXAMPLE)
    assert Footprint.of(masked, EXAMPLE) == Footprint.of(dense, EXAMPLE)
    for name in ("conv1", "conv2"):
        before, after = getattr(dense, name), getattr(masked, name)
        zero = (after.weight.flatten(1).abs().sum(1) == 0) & (after.bias == 0)
        smallest = before.weight.flatten(1).abs().sum(1).argsort()[: before.out_channels // 2]
        assert sorted(zero.nonzero().flatten().tolist()) == sorted(smallest.tolist()), name
        assert torch.equal(after.weight[~zero], before.weight[~zero]), name
    # Masks only cover the pruned layers: the linear layers are as they were.
    assert torch.equal(masked.fc1.weight, dense.fc1.weight)


def test_speed_up_keeps_the_output_shape_and_what_the_masked_model_computes() -> None:
    images = book_batch(16, channels=3, size=32, seed=1)[0]  # not the inputs NNI saw
    dense, masked, pruned = book_cnn(channels=3, size=32), pruned_cnn(0.5, False), pruned_cnn(0.5)
    with torch.no_grad():
        assert pruned(images).shape == dense(images).shape == (16, 10)
        # Removing zeroed channels changes the sums' length, so only rounding differs.
        torch.testing.assert_close(pruned(images), masked(images))


def test_resnet18_pruned_the_same_way_shrinks_and_still_trains() -> None:
    models = pytest.importorskip("torchvision.models")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        dense = models.resnet18(weights=None)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    pruned = one_thread_prune(dense, 0.5, images)
    # Residual additions tie the channels of the convolutions they join: NNI keeps those
    # consistent, so the model shrinks by about half, not exactly.
    shrinkage = assert_shrinks(dense, pruned, example_inputs=images, max_ratio=0.6)
    assert shrinkage.dense.params == 11_689_512
    pruned.train()
    optimizer = torch.optim.SGD(pruned.parameters(), lr=0.01)
    labels = torch.arange(2)
    before = [p.detach().clone() for p in pruned.parameters()]
    loss = train_step(pruned, optimizer, images, labels)
    assert pruned(images).shape == (2, 1000)
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in pruned.parameters())
    assert any(not torch.equal(p, b) for p, b in zip(pruned.parameters(), before))


# The book's CNN for 1x8x8 digits (Linear(64·2·2, 512)): trained, pruned, fine-tuned briefly.
DIGITS_TRAIN = 1400  # of 1,797; the rest is the test split
DENSE_STEPS = 200
FINE_TUNE_STEPS = 50
# Loose: measured over weight seeds 0-2, the 50% model ends 1.5-2.0 points below the dense one
# (97.5-98.2%), the 80% model 5.5-8.3 below. The book lost 4.4 points at 50%, 8.2 at 80%.
ACCURACY_TOLERANCE = {0.5: 0.05, 0.8: 0.15}


@functools.cache
def digits_split() -> tuple[torch.Tensor, ...]:
    features, labels = digits()
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    images = features.view(-1, 1, 8, 8)
    train, test = order[:DIGITS_TRAIN], order[DIGITS_TRAIN:]
    return images[train], labels[train], images[test], labels[test]


def fit(model: nn.Module, steps: int, seed: int) -> nn.Module:
    """``steps`` Adam steps on batches of 64 drawn from the training split with ``seed``."""
    images, labels, _, _ = digits_split()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    draws = torch.Generator().manual_seed(seed)
    with threads(1):  # the same sums in the same order on every run
        for _ in range(steps):
            batch = torch.randint(0, len(labels), (64,), generator=draws)
            train_step(model, optimizer, images[batch], labels[batch])
    return model


def accuracy(model: nn.Module) -> float:
    _, _, images, labels = digits_split()
    with torch.no_grad():
        return (model(images).argmax(1) == labels).float().mean().item()


@functools.cache
def trained_digits_cnn() -> nn.Module:
    return fit(book_cnn(channels=1, size=8), DENSE_STEPS, seed=0)


@pytest.mark.parametrize("sparsity", ACCURACY_TOLERANCE)
def test_pruned_and_fine_tuned_accuracy_stays_within_tolerance_of_dense(sparsity: float) -> None:
    dense = trained_digits_cnn()
    dense_accuracy = accuracy(dense)
    assert dense_accuracy > 0.9  # a poorly trained dense model would make the comparison moot
    pruned = one_thread_prune(dense, sparsity, digits_split()[0][:8])
    assert_shrinks(dense, pruned)
    pruned_accuracy = accuracy(pruned)
    tuned_accuracy = accuracy(fit(pruned, FINE_TUNE_STEPS, seed=1))
    assert tuned_accuracy > pruned_accuracy, "fine-tuning should recover what pruning lost"
    assert tuned_accuracy >= dense_accuracy - ACCURACY_TOLERANCE[sparsity], (
        f"{sparsity:.0%} pruned: {tuned_accuracy:.3f} after fine-tuning, dense {dense_accuracy:.3f}"
    )


# Benchmark: a training step of the dense CNN against the pruned ones, measured in one run.
BOOK_SOURCE = (
    "book ch. 6: CIFAR-10 CNN on a CPU, training time 122 s dense, 89 s pruned at 50%, "
    "76 s at 80% (L1NormPruner on the convolutions + ModelSpeedup)"
)
BOOK_SPEEDUP = {"pruned50": round(122 / 89, 2), "pruned80": round(122 / 76, 2)}
BATCH = 64
# The pruned steps are a few ms, where other jobs on the shared 2-core VM weigh most: over runs
# under different loads (one thread) the 50% speed-up measured 1.6x to 2.4x and the 80% one
# 3.4x to 4.7x, so times and ratios are judged loosely; a lost speed-up (falling to ~1x) shows.
TIME_THRESHOLD = 0.3
SPEEDUP_TOLERANCE = 0.35


def training_step(model: nn.Module, device: torch.device) -> Callable[[], Any]:
    """One SGD step of a copy of ``model`` on a fixed CIFAR-shaped batch on ``device``."""
    model = copy.deepcopy(model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    images, labels = (t.to(device) for t in book_batch(BATCH, channels=3, size=32))
    return lambda: train_step(model, optimizer, images, labels)


@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
def test_training_step_speedup_of_the_pruned_book_cnn(benchmark: Any, device: torch.device) -> None:
    models = {
        "dense": book_cnn(channels=3, size=32),
        "pruned50": pruned_cnn(0.5),
        "pruned80": pruned_cnn(0.8),
    }
    targets = {name: training_step(model, device) for name, model in models.items()}
    # One thread, the reference workload included: on the shared 2-core VM two threads wait on
    # each other whenever a neighbour holds a core (the dense step took 37 ms to 700 ms, the
    # 80% one now faster and now slower than the 50% one); one thread shows the work removed.
    with threads(1):
        benchmark.variants(targets, baseline="dense", tolerance=SPEEDUP_TOLERANCE)
    if benchmark.disabled:  # --benchmark-disable or xdist: nothing measured to cite beside
        return
    benchmark.record("batch_size", BATCH)
    for name, model in models.items():
        benchmark.record(f"params[{name}]", Footprint.of(model).params)
    for name, value in BOOK_SPEEDUP.items():
        benchmark.cite(f"speedup[{name}/dense]", value, BOOK_SOURCE)
