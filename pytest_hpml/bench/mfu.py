"""The ``mfu`` metric, model FLOP utilization: a benchmark's achieved FLOP/s over its device's
dense peak in the precision that ran most of its FLOPs (Note [MFU] in docs/notes.md).

Imported once a benchmark has been measured, with torch loaded.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..hardware import peaks
from . import metrics
from .measure import Series

# ``given`` below is a ``fixture.Peaks``, named not imported: the fixture module imports this
# layer's measuring code when a test asks for ``benchmark``.


class Dominant(NamedTuple):
    """Where most of a step's FLOPs ran, and whether mostly in convolutions."""

    device: str
    dtype: str
    convolution: bool


def dominant(tally: Mapping[Any, int]) -> Dominant | None:
    """The device and dtype with the most FLOPs (``tally``: FLOPs by ``work.FlopKey``); ties go
    to the first in name order, so that every process picks the same. None without FLOPs."""
    pairs: Counter[tuple[str, str]] = Counter()
    for key, flops in tally.items():
        pairs[key.device, key.dtype] += flops
    ranked = sorted((-flops, pair) for pair, flops in pairs.items() if flops > 0)
    if not ranked:
        return None
    device, dtype = ranked[0][1]
    ours = [(key.convolution, flops) for key, flops in tally.items() if key[:2] == (device, dtype)]
    convolutions = sum(flops for convolution, flops in ours if convolution)
    return Dominant(device, dtype, 2 * convolutions > sum(flops for _, flops in ours))


def worth_counting(device: Any, given: Any) -> bool:
    """Whether a peak may be known for the test's ``device`` (None: CUDA where it was used, else
    the CPU): where only the table answers, on a GPU alone. Counting FLOPs costs a call, which a
    process that counts no work pays only then."""
    return device_type(device) == "cuda" or given.beyond_table()


def device_type(device: Any) -> str:
    """The type of the test's ``device``; for a test without one, CUDA if it was used."""
    kind = getattr(device, "type", None)
    if kind is not None:
        return str(kind)
    torch = sys.modules.get("torch")
    return "cuda" if torch is not None and torch.cuda.is_initialized() else "cpu"


def uncounted(device: Any) -> str:
    """Why there is no ``mfu`` for a step whose FLOPs were not counted by dtype because no peak
    could be known for its device (:func:`worth_counting`)."""
    return peaks.missing(device_type(device), None, None)


def utilization(
    tally: Mapping[Any, int], flops: float, series: Series, given: Any
) -> tuple[dict[str, Any] | None, str | None]:
    """The ``mfu`` record of a step of ``flops`` FLOPs a call timed as ``series``, its
    precision found from ``tally`` (FLOPs by ``work.FlopKey``); or None and why, where no peak
    is known (None and None: no FLOPs or no samples, nothing to say)."""
    import torch

    top = dominant(tally)
    if top is None or flops <= 0 or not series.samples:
        return None, None
    device = torch.device(top.device)
    precision = peaks.device_precision(device, top.dtype, top.convolution)
    peak = given.ask(device, precision)
    if peak is None:
        return None, peaks.missing(device.type, peaks.device_name(device), precision)
    if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not 0 < peak < math.inf:
        raise ValueError(
            f"the peak of {device} in {precision} is {peak!r} (pytest_hpml_peak_flops): "
            "expected a positive number of FLOP/s"
        )
    return record(series, flops, float(peak), precision), None


def record(series: Series, flops: float, peak: float, precision: str) -> dict[str, Any]:
    """The record: each sample is the FLOP/s of its rounds (``flops`` a call over the seconds a
    call took) over ``peak``."""
    share = flops / peak
    samples, cpu = ([share / s for s in times] for times in (series.samples, series.cpu_samples))
    return metrics.Utilization(
        "",
        samples=samples,
        cpu_samples=cpu or None,
        reference=series.reference,
        peak=peak,
        precision=precision,
    ).as_dict()
