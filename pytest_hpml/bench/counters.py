"""Deterministic counts of one call: parameters, FLOPs, peak tensor memory, and what dynamo
compiled. The same on every machine with the same torch (CUDA's allocator peak aside)."""

from __future__ import annotations

from typing import Any, Callable

from .. import _compat


def model_size(model: Any) -> tuple[int, int]:
    """Parameters and their bytes (buffers included in the bytes)."""
    params = list(model.parameters())
    count = sum(p.numel() for p in params)
    size = sum(t.numel() * t.element_size() for t in [*params, *model.buffers()])
    return count, size


def count_flops(fn: Callable[[], Any]) -> int | None:
    """FLOPs of one call, counted by torch's FlopCounterMode (None if it cannot run under it)."""
    import warnings

    from torch.utils.flop_counter import FlopCounterMode

    try:
        with warnings.catch_warnings(), FlopCounterMode(display=False) as counter:
            # The counter's global module hooks make a compiled module warn; counting is fine.
            warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)`")
            fn()
    except Exception:  # e.g. a compiled graph that cannot run under a dispatch mode
        return None
    return int(counter.get_total_flops())


def cuda_peak_memory(call: Callable[[], Any], device: Any, sync: Callable[[], None]) -> int:
    """Bytes CUDA's caching allocator held at most during one call, above what was there."""
    import torch

    sync()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call()
    sync()
    return int(torch.cuda.max_memory_allocated(device) - before)


def tracked_peak_memory(call: Callable[[], Any]) -> int | None:
    """Most bytes of tensor storage that one call had allocated at once (its own allocations,
    freed ones subtracted), counted by a dispatch mode: the same from run to run."""
    from .memory import StorageTracker

    try:
        with StorageTracker() as tracker:
            call()
    except Exception:  # e.g. compiled code that cannot run under a dispatch mode
        return None
    return int(tracker.peak)


class DynamoCounters:
    """Graphs, graph breaks and recompilations of compiled code during a measurement, from
    dynamo's counters (nothing when torch.compile is not in use)."""

    def __init__(self) -> None:
        self.start = self.warm = _compat.dynamo_counters()

    def mark(self) -> None:
        self.warm = _compat.dynamo_counters()

    def metrics(self) -> dict[str, int]:
        if self.start is None or self.warm is None:
            return {}
        end = _compat.dynamo_counters()
        assert end is not None  # torch._dynamo, loaded at the start, stays loaded
        graphs = self.warm["graphs"] - self.start["graphs"]
        if end["frames"] == self.start["frames"]:
            return {}  # dynamo saw no frame: no compiled code here
        # The larger increase of two counters: Note [Graph breaks].
        breaks = max(self.warm[k] - self.start[k] for k in ("graph_break", "unimplemented"))
        # A frame dynamo gave up on entirely makes 0 graphs: recorded, so that it shows.
        return {
            "graphs": graphs,
            "graph_breaks": breaks,
            "recompiles": end["graphs"] - self.warm["graphs"],
        }
