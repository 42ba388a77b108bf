"""torch.compile as book ch. 3 teaches it: a compiled model computes what the eager one does,
the suite's models compile into one graph that later steps reuse, a data-dependent branch
breaks the graph, a new batch size recompiles once into a dynamic-shape graph, and the
compiled training step's first-call (compile) time, step time and speed-up over eager.

Every test runs for each ``--hpml-backend``. ``eager`` compiles nothing: under it the graph
test checks exactly that (no graph is captured), the output test compares eager with a copy of
itself in each precision, and the tests about breaks, shapes and speed skip; select
``--hpml-backend=eager,aot_eager`` (seconds) or ``eager,inductor`` (a minute or more of C++
kernel builds on a cold machine) to run them.

Graphs and breaks are read from dynamo's counters, as pytest-hpml reads them for
``benchmark(...)``: ``unique_graphs`` for graphs, the ``graph_break`` and ``unimplemented``
entries for breaks. The book's CPU figure (a small CNN got slower compiled) holds here for
inductor on the book's CNN; its GPU figure (DenseNet121, 1.57x) has a benchmark of its own
that runs only on CUDA, and only with ``--hpml-run-slow``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_hpml import CompileBackend, Precision
from suites.models import book_batch, book_cnn, digits, image_batch, mlp, tiny_cnn, train_step

Batch = tuple[torch.Tensor, torch.Tensor]

NOTHING_COMPILED = (
    "eager compiles nothing; select --hpml-backend=aot_eager or --hpml-backend=inductor"
)


def digits_batch(batch_size: int = 64) -> Batch:
    """The first ``batch_size`` of scikit-learn's digits: the MLP's real input."""
    images, labels = digits()
    return images[:batch_size], labels[:batch_size]


# The suite's models, each with a batch it trains on: the book's CNN on Fashion-MNIST-shaped
# images, the tiny CNN on small random images, the MLP on digits.
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], Batch]]] = {
    "book_cnn": (book_cnn, lambda: book_batch(32)),
    "tiny_cnn": (tiny_cnn, lambda: image_batch(16)),
    "mlp": (mlp, digits_batch),
}


@dataclass(frozen=True)
class Counts:
    """Graphs dynamo has captured and graph breaks it has met (in this process, so far)."""

    graphs: int
    breaks: int

    @classmethod
    def now(cls) -> Counts:
        from torch._dynamo.utils import counters

        # An explicit break is counted under graph_break, a data-dependent branch under
        # unimplemented, a break inside an inlined call under both (so the sum may exceed the
        # breaks: the tests only tell none from some). pytest-hpml takes the larger of the two
        # increases instead (Note [Graph breaks]): it records exact counts.
        breaks = sum(counters["graph_break"].values()) + sum(counters["unimplemented"].values())
        return cls(counters["stats"]["unique_graphs"], breaks)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.graphs - other.graphs, self.breaks - other.breaks)


def load(name: str, device: torch.device) -> tuple[nn.Module, Batch]:
    make, batch = MODELS[name]
    images, labels = batch()
    return make().to(device), (images.to(device), labels.to(device))


def outputs_and_gradients(
    model: nn.Module, batch: Batch, precision: Precision
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits of one forward pass (autocast for fp16/bf16, around forward and loss as the book
    does it) and the parameters' gradients of its loss."""
    images, labels = batch
    model.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
    loss.backward()
    return logits.detach(), [p.grad.detach().clone() for p in model.parameters()]


def training_step(model: nn.Module, batch: Batch, lr: float = 0.01) -> Callable[[], torch.Tensor]:
    """One SGD step of ``model`` on ``batch``: forward, loss, backward, update."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    return functools.partial(train_step, model, optimizer, *batch)


@pytest.mark.parametrize("name", MODELS)
def test_compiled_model_gives_eager_outputs_and_gradients(
    name: str, backend: CompileBackend, precision: Precision, device: torch.device
) -> None:
    model, batch = load(name, device)
    compiled = backend.compile(copy.deepcopy(model))
    expected_logits, expected_grads = outputs_and_gradients(model, batch, precision)
    logits, grads = outputs_and_gradients(compiled, batch, precision)
    # Both sides run in the same precision; its tolerance (made for a comparison with fp32) is
    # wider than what fusing and reordering the same float ops moves.
    precision.assert_close(logits, expected_logits)
    assert len(grads) == len(expected_grads)
    for grad, expected in zip(grads, expected_grads):
        precision.assert_close(grad, expected)


@pytest.mark.parametrize("name", MODELS)
def test_model_compiles_into_one_graph_that_later_steps_reuse(
    name: str, backend: CompileBackend, device: torch.device
) -> None:
    model, batch = load(name, device)
    step = training_step(backend.compile(model), batch)
    start = Counts.now()
    step()
    first = Counts.now()
    for _ in range(3):  # same shapes; the optimizer has changed every parameter in place
        step()
    # A graph break would give two or more graphs; eager must capture none.
    assert first - start == Counts(graphs=1 if backend.compiles else 0, breaks=0)
    assert Counts.now() == first, "a step of the same shape compiled again"


class NanGuardedMLP(nn.Module):
    """:func:`~suites.models.mlp` whose hidden layer is cleaned only when it holds a NaN.

    Whether the branch runs depends on the tensor's values, which dynamo cannot know while
    tracing: it breaks the graph there (dynamo's own message suggests the fix: call
    ``torch.nan_to_num`` unconditionally, which needs no branch).
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        body = mlp(seed=seed)
        self.hidden, self.head = body[:2], body[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.hidden(x)
        if torch.isnan(hidden).any():
            hidden = torch.nan_to_num(hidden)
        return self.head(hidden)


def compiled_copy(
    backend: CompileBackend, model: nn.Module, why_skip: str
) -> tuple[nn.Module, nn.Module]:
    """``model`` and a compiled copy of it; the test is skipped (``why_skip``) under eager."""
    if not backend.compiles:
        pytest.skip(f"{why_skip}: {NOTHING_COMPILED}")
    return model, backend.compile(copy.deepcopy(model))


def test_data_dependent_branch_breaks_the_graph_and_still_computes_eagers_result(
    backend: CompileBackend, device: torch.device
) -> None:
    model, compiled = compiled_copy(
        backend, NanGuardedMLP().to(device), "a graph break needs a graph"
    )
    clean, _ = digits_batch(16)
    dirty = clean.clone()
    dirty[::2, 0] = float("nan")
    start = Counts.now()
    with torch.no_grad():  # fp32 on both sides: torch.testing's fp32 tolerances
        torch.testing.assert_close(compiled(clean.to(device)), model(clean.to(device)))
        counts = Counts.now() - start
        torch.testing.assert_close(compiled(dirty.to(device)), model(dirty.to(device)))
    assert counts.breaks >= 1, counts
    assert counts.graphs >= 2, counts  # the code before the branch, and the code after it


def test_new_batch_size_recompiles_once_into_a_graph_for_any_batch_size(
    backend: CompileBackend, device: torch.device
) -> None:
    model, compiled = compiled_copy(backend, mlp().to(device), "nothing to recompile")
    images, _ = digits_batch(64)
    images = images.to(device)
    added = []
    with torch.no_grad():  # fp32 on both sides: torch.testing's fp32 tolerances
        for batch_size in (64, 32, 16, 48):
            start = Counts.now()
            torch.testing.assert_close(compiled(images[:batch_size]), model(images[:batch_size]))
            added.append((Counts.now() - start).graphs)
    # dynamo first specializes on the batch size; when it changes, it compiles once more with
    # the batch dimension symbolic (automatic dynamic shapes), which later sizes reuse.
    assert added == [1, 1, 0, 0]


@contextlib.contextmanager
def graph_caches_off() -> Iterator[None]:
    """Inductor's FX-graph cache and AOTAutograd's cache off, so the first call traces and
    lowers the model again whatever earlier tests or runs left on disk: the first-call time is
    a compile time. Kernels already built on this machine are still reused (their C++/Triton
    build is the part of a cold compile that a warm machine never pays again)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    no_fx_cache = inductor_config.patch(fx_graph_cache=False)
    with no_fx_cache, functorch_config.patch(enable_autograd_cache=False):
        yield


# On the shared 2-core VM the step times moved by up to 15x with the neighbours' load and the
# in-run speed-up of inductor over eager between 0.48x and 1.04x over six runs, so the margins
# are as wide as the optimizer benchmarks': a lost compilation (a speed-up falling to 1x) or a
# doubled step still shows; a graph break or recompilation shows exactly, in the counts.
TIME_THRESHOLD = 0.3
SPEEDUP_TOLERANCE = 0.2


def benchmark_compiled_step(
    benchmark: Any,
    backend: CompileBackend,
    device: torch.device,
    make_model: Callable[[], nn.Module],
    batch: Batch,
) -> None:
    """Time one training step of ``make_model()`` on ``batch`` (both moved to ``device``) eager
    and compiled with ``backend``, interleaved: each one's first call and step time, and the
    speed-up. The plugin records the graphs, graph breaks and recompilations dynamo counted (as
    exact baselines). Skipped under eager, before the model is built."""
    if not backend.compiles:
        pytest.skip(f"no speed-up to measure: {NOTHING_COMPILED}")
    model = make_model().to(device)
    batch = (batch[0].to(device), batch[1].to(device))
    eager_step = training_step(model, batch)
    compiled_step = training_step(backend.compile(copy.deepcopy(model)), batch)
    # Not warmed up here: the plugin times each variant's first call on its own (the time
    # metric's first_call: the compile, for the compiled step) and warms both up before its
    # rounds, so the compile never lands in the step times.
    with graph_caches_off():
        benchmark.variants(
            {"eager": eager_step, backend.name: compiled_step},
            baseline="eager",
            tolerance=SPEEDUP_TOLERANCE,
        )


@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
def test_compiled_book_cnn_step_time_and_speedup_over_eager(
    benchmark: Any, backend: CompileBackend, device: torch.device
) -> None:
    # The batch of the correctness tests: the kernels inductor built for them are reused.
    benchmark_compiled_step(benchmark, backend, device, book_cnn, book_batch(32))
    if backend.name == "inductor" and device.type == "cpu":  # the book's backend and device
        benchmark.cite(
            "speedup[inductor/eager]",
            round(118 / 140, 2),
            "book ch. 3: a small CNN on a CPU, 118 s eager vs 140 s compiled (slower)",
        )


@pytest.mark.slow  # DenseNet121 takes minutes to compile, and a 2-core CPU minutes to train it
@pytest.mark.device("cuda")
@pytest.mark.hpml_bench(threshold=TIME_THRESHOLD)
def test_compiled_densenet121_step_time_and_speedup_over_eager(
    benchmark: Any, backend: CompileBackend, device: torch.device
) -> None:
    from torchvision.models import densenet121

    def make_model() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return densenet121(weights=None, num_classes=10)

    batch = book_batch(64, channels=3, size=32)  # CIFAR-10-shaped
    benchmark_compiled_step(benchmark, backend, device, make_model, batch)
    if backend.name == "inductor":
        benchmark.cite(
            "speedup[inductor/eager]",
            round(2264 / 1443, 2),
            "book ch. 3: DenseNet121 on an A100, 2,264 s eager vs 1,443 s compiled "
            "(median epoch 45 s vs 26 s, 1.73x)",
        )
