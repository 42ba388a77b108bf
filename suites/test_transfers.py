"""Host-to-device transfers, as the CUDA lectures teach them.

Copies from pinned (page-locked) host memory go straight to the GPU by DMA, so they are faster
than copies from pageable memory (which the driver stages through a pinned buffer of its own)
and, with ``non_blocking=True`` on a stream other than the compute's, they overlap compute.
Asynchronous copies must still be exact: bit for bit what a blocking copy gives. Code written
against a ``torch.device`` round-trips tensors on any device. ``suites/test_devices.py``
checks that a pinned copy returns before the GPU is done, that one copy on a side stream runs
during compute and how ``CUDA_VISIBLE_DEVICES`` renumbers GPUs; this file measures bandwidth
and how much of a copy's time overlap hides.

The CUDA tests take ``@pytest.mark.device("cuda")``: on a machine without a GPU they are
skipped with the reason.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

MiB = 1 << 20
# Latency-bound, in between, and bandwidth-bound copies.
SIZES = {"256KiB": MiB // 4, "4MiB": 4 * MiB, "64MiB": 64 * MiB}
OVERLAP_BYTES = 64 * MiB  # a copy of ~1-3 ms over PCIe: long against launch and event overheads
REPEATS = 5  # event timings per configuration; medians are compared
BITS = {  # dtypes and the integer dtype of their width, to compare bit patterns
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.int64: torch.int64,
}


def random_bits(count: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """``count`` values of ``dtype`` made of random bits: NaNs with payloads, infinities,
    signed zeros and subnormals included, so only an exact copy compares equal."""
    bits = BITS[dtype]
    info = torch.iinfo(bits)
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(info.min, info.max, (count,), dtype=bits, generator=generator).view(
        dtype
    )
    if dtype.is_floating_point:  # make sure the special values are there
        tiny = torch.finfo(dtype).smallest_normal / 2
        specials = [math.inf, -math.inf, math.nan, -0.0, tiny, -tiny]
        values[: len(specials)] = torch.tensor(specials, dtype=dtype)
    return values


def same_bits(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Bitwise equality (NaN == NaN when the bits agree), on ``expected``'s device."""
    assert actual.dtype == expected.dtype
    bits = BITS[expected.dtype]
    return torch.equal(actual.to(expected.device).view(bits), expected.view(bits))


# --- any device -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(BITS), ids=lambda d: str(d).removeprefix("torch."))
def test_to_device_and_back_is_exact(device: torch.device, dtype: torch.dtype) -> None:
    host = random_bits(4096, dtype)
    moved = host.to(device, non_blocking=True)  # legal from pageable memory too; just not async
    assert moved.device.type == device.type
    if device.type == "cpu":
        assert moved is host, ".to() onto the tensor's own device must not copy"
    else:
        assert moved.data_ptr() != host.data_ptr()
    copied = host.to(device, copy=True)
    assert copied is not host
    # A blocking copy to the CPU waits for everything queued before it on the stream.
    back = moved.to("cpu")
    assert back.device.type == "cpu"
    assert same_bits(back, host)
    assert same_bits(copied.cpu(), host)


def test_without_an_accelerator_nothing_is_pinned() -> None:
    # device_count() asks NVML first, so checking does not create a CUDA context.
    if (
        torch.cuda.device_count() > 0
        or torch.backends.mps.is_available()
        or torch.accelerator.is_available()
    ):
        pytest.skip("an accelerator is present: pinning works here (the CUDA tests check it)")
    host = torch.arange(8, dtype=torch.float32)
    assert not host.is_pinned()
    # Page-locked memory is allocated through the accelerator's runtime: none, no pinning.
    with pytest.raises(RuntimeError):
        host.pin_memory()
    with pytest.raises(RuntimeError):
        torch.empty(8, pin_memory=True)
    # A DataLoader asked to pin says it cannot and hands out ordinary batches, so device-
    # agnostic training code with pin_memory=True still runs on a CPU-only machine.
    loader = DataLoader(TensorDataset(host.view(4, 2)), batch_size=2, pin_memory=True)
    with pytest.warns(UserWarning, match="no accelerator is found"):
        batches = [batch for (batch,) in loader]
    assert torch.equal(torch.cat(batches), host.view(4, 2))
    assert not any(batch.is_pinned() for batch in batches)


# --- CUDA -----------------------------------------------------------------------------------


# Pageable copies include a memcpy into the driver's staging buffer, done by the CPU: they move
# with the host's load more than DMA does, hence a margin wider than the default 6%.
@pytest.mark.device("cuda")
@pytest.mark.hpml_bench(threshold=0.15)
@pytest.mark.parametrize("nbytes", list(SIZES.values()), ids=list(SIZES))
def test_pinned_memory_copies_faster_than_pageable(
    benchmark: Any, device: torch.device, nbytes: int
) -> None:
    pageable = torch.randn(nbytes // 4)
    pinned = pageable.pin_memory()
    assert pinned.is_pinned()
    assert not pageable.is_pinned()
    targets = {name: torch.empty(nbytes // 4, device=device) for name in ("pageable", "pinned")}

    def upload(name: str, source: torch.Tensor) -> Callable[[], torch.Tensor]:
        # The same call for both: only the kind of host memory differs. The benchmark
        # synchronizes the device at the end of each round, so the copies are fully counted.
        return lambda: targets[name].copy_(source, non_blocking=True)

    # Counted, whatever the timing: each call is one host-to-device copy, and neither kind
    # of host memory makes the host wait for the device.
    benchmark.expect(syncs=0, copies=1)
    series = benchmark.variants(
        {"pageable": upload("pageable", pageable), "pinned": upload("pinned", pinned)},
        baseline="pageable",
        tolerance=0.2,
    )
    torch.cuda.synchronize(device)
    for name, target in targets.items():
        assert torch.equal(target.cpu(), pageable), f"the {name} copy is wrong"
    if all(s.samples for s in series.values()):  # nothing measured under --benchmark-disable
        for name, s in series.items():
            # Bandwidth is a time in other units; kept for the reader, judged only loosely (a
            # halving means a lost PCIe link or lost pinning, not noise).
            benchmark.record(
                f"bandwidth[{name}]",
                round(nbytes / s.median / 1e9, 2),
                unit="GB/s",
                tolerance=0.5,
                portable=False,
                higher_is_worse=False,
            )


def elapsed_ms(
    main: torch.cuda.Stream,
    copy_stream: torch.cuda.Stream,
    copy: Callable[[], Any] | None,
    compute: Callable[[], Any] | None,
) -> float:
    """GPU time from the start of the first to the end of the last of ``copy`` (queued on
    ``copy_stream``) and ``compute`` (queued on ``main``), measured with CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record(main)
    if copy is not None:
        copy_stream.wait_stream(main)  # starts after ``start``, not before
        with torch.cuda.stream(copy_stream):
            copy()
    if compute is not None:
        compute()
    main.wait_stream(copy_stream)  # ``end`` comes after both
    end.record(main)
    end.synchronize()
    return start.elapsed_time(end)


def median_ms(measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(REPEATS))


@pytest.mark.device("cuda")
def test_non_blocking_copy_from_pinned_memory_overlaps_compute_on_another_stream(
    device: torch.device,
) -> None:
    with torch.cuda.device(device):
        host = torch.randn(OVERLAP_BYTES // 4).pin_memory()
        on_gpu = torch.empty_like(host, device=device)
        matrix = torch.randn(2048, 2048, device=device)
        product = torch.empty_like(matrix)
        main, side = torch.cuda.current_stream(), torch.cuda.Stream()

        def copy() -> None:
            on_gpu.copy_(host, non_blocking=True)

        def matmuls(count: int) -> Callable[[], None]:
            def compute() -> None:
                for _ in range(count):
                    torch.mm(matrix, matrix, out=product)

            return compute

        # Warm up (cuBLAS handles, the copy path), then size the compute to about the copy.
        elapsed_ms(main, side, copy, matmuls(2))
        copy_ms = median_ms(lambda: elapsed_ms(main, side, copy, None))
        one_ms = median_ms(lambda: elapsed_ms(main, side, None, matmuls(1)))
        compute = matmuls(max(1, round(copy_ms / one_ms)))
        compute_ms = median_ms(lambda: elapsed_ms(main, side, None, compute))
        both_ms = median_ms(lambda: elapsed_ms(main, side, copy, compute))
        # Control: the same work on one stream is serialized by stream order, whatever the
        # memory: this shows that the measurement can tell overlap from none.
        serial_ms = median_ms(lambda: elapsed_ms(main, main, copy, compute))
        torch.cuda.synchronize()

    shorter = min(copy_ms, compute_ms)
    overlap = (copy_ms + compute_ms - both_ms) / shorter
    serial_overlap = (copy_ms + compute_ms - serial_ms) / shorter
    timings = (
        f"copy {copy_ms:.3f} ms, compute {compute_ms:.3f} ms, on two streams {both_ms:.3f} ms, "
        f"on one stream {serial_ms:.3f} ms"
    )
    # A correctness property of pinned asynchronous copies, so asserted from one run: the copy
    # engine and the SMs work at once. Full overlap hides the whole shorter job (1.0); the bar
    # is loose because launch gaps and event timing eat some of it; the same work serialized
    # on one stream hides nothing (~0), which the control checks.
    assert overlap > 0.5, f"only {overlap:.0%} of the shorter job was hidden: {timings}"
    assert serial_overlap < 0.25, f"one stream overlapped {serial_overlap:.0%}?: {timings}"
    assert torch.equal(on_gpu.cpu(), host)


@pytest.mark.device("cuda")
@pytest.mark.parametrize("dtype", list(BITS), ids=lambda d: str(d).removeprefix("torch."))
def test_non_blocking_copies_equal_blocking_copies_bitwise(
    device: torch.device, dtype: torch.dtype
) -> None:
    host = random_bits(MiB, dtype)
    with torch.cuda.device(device):
        blocking = host.to(device)
        pinned = host.pin_memory()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            uploaded = pinned.to(device, non_blocking=True)
            downloaded = torch.empty(host.shape, dtype=dtype, pin_memory=True)
            downloaded.copy_(uploaded, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)  # the stream ordering a reader needs
        assert same_bits(uploaded, blocking)
        side.synchronize()  # the host may read ``downloaded`` only now
    assert same_bits(downloaded, host)
    assert same_bits(blocking.cpu(), host)
