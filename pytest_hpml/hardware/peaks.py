"""The dense peak FLOP/s of common GPUs by precision, the denominator of the ``mfu`` metric
(Note [MFU] in docs/notes.md).

The table is plain data and the functions that read it are pure: they take what
``torch.cuda.get_device_properties`` returns (anything with ``.name``, ``.major``,
``.minor``), so they are tested on the CPU with made-up properties. torch is imported only by
the functions that read its flags or ask it about a device, which run once a benchmark has run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The precision of the step's dominant dtype (float8 dtypes are all fp8).
_BY_DTYPE = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
TF32_CAPABILITY = (8, 0)  # TF32 tensor cores: Ampere and later

T = 1e12  # FLOP/s in a TFLOP/s: the datasheets' unit


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU model: the pattern its torch device name matches (case-insensitive), the dense
    peak FLOP/s of each precision it has a figure for, where the figures come from, and, for a
    GPU that can be partitioned (MIG), its streaming multiprocessors: a MIG slice has a share
    of them at the same clocks, hence the same share of the peak."""

    model: str
    pattern: str
    flops: Mapping[str, float]
    source: str
    sms: int | None = None

    def matches(self, name: str) -> bool:
        return re.search(self.pattern, name, flags=re.IGNORECASE) is not None


# Dense figures only: where a datasheet gives tensor-core figures "with sparsity" (2:4
# structured sparsity, twice the dense rate), they are halved here. fp32 is the non-tensor
# (CUDA core) rate; tf32, bf16, fp16 and fp8 are tensor-core rates with FP32 accumulation, the
# way torch's matmuls and convolutions run. Names are torch's (``get_device_properties().name``):
# "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB", ...
TABLE: tuple[GpuPeaks, ...] = (
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper (v1.02), table "NVIDIA Tesla A100, H100
    # SXM5 and H100 PCIe": dense/sparse columns, the dense ones taken. The SXM5 part reports
    # its memory ("80GB HBM3"); the PCIe part says PCIe (its memory is HBM2e).
    GpuPeaks(
        "H100 PCIe",
        r"\bH100\b.*\b(PCIe|HBM2e)\b",
        {"fp32": 51.2 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T},
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 PCIe, dense)",
        sms=114,
    ),
    GpuPeaks(
        "H100 SXM",
        r"\bH100\b(?!.*\b(PCIe|HBM2e|NVL)\b)",  # the NVL part is slower: not in the table
        {
            "fp32": 66.9 * T,
            "tf32": 494.7 * T,
            "bf16": 989.4 * T,
            "fp16": 989.4 * T,
            "fp8": 1978.9 * T,
        },
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5, dense)",
        sms=132,
    ),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: TF32 989, BF16/FP16 1,979 and FP8
    # 3,958 TFLOPS with sparsity, halved; FP32 67 TFLOPS. (H200 NVL and GH200 are other parts.)
    GpuPeaks(
        "H200 SXM",
        r"\bH200\b(?!.*\bNVL\b)",
        {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM, sparse figures halved)",
        sms=132,  # the H100 SXM5's GH100 configuration
    ),
    # NVIDIA A100 Tensor Core GPU datasheet: the same figures for the 40 GB and 80 GB parts, SXM4
    # and PCIe: FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS (312/624 with sparsity). No FP8.
    GpuPeaks(
        "A100",
        r"\bA100\b",
        {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
        "NVIDIA A100 Tensor Core GPU datasheet (40 GB and 80 GB, dense)",
        sms=108,  # NVIDIA A100 Tensor Core GPU Architecture whitepaper
    ),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 TFLOPS; TF32 120, BF16/FP16 242 and FP8
    # 485 TFLOPS with sparsity, halved.
    GpuPeaks(
        "L4",
        r"\bL4\b",
        {"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T, "fp8": 242.5 * T},
        "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)",
    ),
    # NVIDIA L40S datasheet, which gives dense and sparse figures: FP32 91.6, TF32 183,
    # BF16/FP16 362.05, FP8 733 TFLOPS dense. (The L40 is another part.)
    GpuPeaks(
        "L40S",
        r"\bL40S\b",
        {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T, "fp8": 733 * T},
        "NVIDIA L40S GPU datasheet (dense)",
    ),
    # NVIDIA publishes no datasheet for the A10G, AWS's variant of the A10; AWS's G5 page quotes
    # 250 INT8 TOPS, the A10's dense figure, so the A10's are used. NVIDIA A10 Tensor Core GPU
    # datasheet: FP32 31.2, TF32 62.5, BF16/FP16 125 TFLOPS (125/250 with sparsity).
    GpuPeaks(
        "A10G",
        r"\bA10G\b",
        {"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T},
        "NVIDIA A10 Tensor Core GPU datasheet (dense; NVIDIA publishes none for the A10G)",
    ),
    # NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1, mixed precision (FP16/FP32) 65 TFLOPS. No
    # TF32 or BF16 tensor cores (Turing).
    GpuPeaks(
        "T4",
        r"\bT4\b",
        {"fp32": 8.1 * T, "fp16": 65 * T},
        "NVIDIA T4 Tensor Core GPU datasheet",
    ),
    # NVIDIA Tesla V100 datasheet: SXM2 FP32 15.7 and tensor (FP16 with FP32 accumulation) 125
    # TFLOPS; PCIe 14 and 112; V100S PCIe 16.4 and 130. No TF32 or BF16 (Volta).
    GpuPeaks(
        "V100 SXM2",
        r"\bV100-SXM2\b",
        {"fp32": 15.7 * T, "fp16": 125 * T},
        "NVIDIA Tesla V100 datasheet (V100 SXM2)",
    ),
    GpuPeaks(
        "V100 PCIe",
        r"\bV100-PCIE\b",
        {"fp32": 14 * T, "fp16": 112 * T},
        "NVIDIA Tesla V100 datasheet (V100 PCIe)",
    ),
    GpuPeaks(
        "V100S PCIe",
        r"\bV100S-PCIE\b",
        {"fp32": 16.4 * T, "fp16": 130 * T},
        "NVIDIA Tesla V100S datasheet (V100S PCIe)",
    ),
    # NVIDIA Ada GPU Architecture whitepaper, appendix table of the GeForce RTX 4090: FP32 82.6;
    # TF32 82.6; BF16 and FP16 with FP32 accumulation 165.2 (330.3 for FP16 with FP16
    # accumulation, which torch does not use); FP8 with FP32 accumulation 330.3 TFLOPS dense.
    # (The 4090 D and the laptop GPU are other parts.)
    GpuPeaks(
        "GeForce RTX 4090",
        r"\bRTX 4090\b(?! D\b)(?!.*\bLaptop\b)",
        {
            "fp32": 82.6 * T,
            "tf32": 82.6 * T,
            "bf16": 165.2 * T,
            "fp16": 165.2 * T,
            "fp8": 330.3 * T,
        },
        "NVIDIA Ada GPU Architecture whitepaper (GeForce RTX 4090, dense, FP32 accumulation)",
    ),
)


def find(name: str) -> GpuPeaks | None:
    """The table's entry for a GPU named ``name`` as torch names it, or None."""
    return next((gpu for gpu in TABLE if gpu.matches(name)), None)


def precision_of(
    dtype: str, *, tf32: bool = False, capability: tuple[int, int] | None = None
) -> str:
    """The precision whose peak applies to a step whose FLOPs are mostly in ``dtype`` (torch's
    name: ``float32``, ``bfloat16``, ``float8_e4m3fn``).

    float32 runs on TF32 tensor cores where ``tf32`` says the backend running most of its FLOPs
    may use them (:func:`tf32_enabled`) on a GPU of compute capability 8.0 or more (Ampere and
    later; older GPUs have no TF32 and compute true fp32): the tf32 peak applies then, the fp32
    peak otherwise. Every float8 dtype is fp8. Another dtype (int8, complex64) keeps its name,
    for which the table has no figure.
    """
    if dtype == "float32" and tf32 and capability is not None and capability >= TF32_CAPABILITY:
        return "tf32"
    if dtype.startswith("float8"):
        return "fp8"
    return _BY_DTYPE.get(dtype, dtype)


def peak_flops(properties: Any, precision: str) -> float | None:
    """The dense peak FLOP/s of the GPU ``properties`` describe (an object with ``.name``, such
    as ``torch.cuda.get_device_properties`` returns) in ``precision``; None where the table has
    no figure. A MIG slice (fewer ``multi_processor_count`` than the whole GPU) gets its share."""
    gpu = find(str(getattr(properties, "name", "")))
    peak = None if gpu is None else gpu.flops.get(precision)
    if gpu is None or peak is None:
        return None
    sms = getattr(properties, "multi_processor_count", None)
    if gpu.sms and isinstance(sms, int) and 0 < sms < gpu.sms:  # a MIG slice
        return peak * sms / gpu.sms
    return peak


def missing(device_type: str, name: str | None, precision: str | None) -> str:
    """Why no peak is known, in words: "the CPU has no peak in the table", "NVIDIA X has no
    known peak", "Tesla T4 has no known bf16 peak"."""
    if device_type != "cuda":
        what = "the CPU" if device_type == "cpu" else f"the {device_type} device"
        return f"{what} has no peak in the table"
    name = name or "this GPU"
    if precision is None or find(name) is None:
        return f"{name} has no known peak"
    return f"{name} has no known {precision} peak"


def tf32_enabled(convolution: bool) -> bool:
    """Whether float32 may run on TF32 tensor cores: for a convolution, cuDNN's flag
    (``torch.backends.cudnn.allow_tf32``, on by default); else the matmul flag
    (``torch.backends.cuda.matmul.allow_tf32`` or ``torch.get_float32_matmul_precision()``
    other than ``"highest"``, off by default). torch >= 2.9 refuses to read the legacy flags
    once its ``fp32_precision`` settings were used: those are read then."""
    import torch

    backends = torch.backends
    try:
        if convolution:
            return bool(backends.cudnn.allow_tf32)
        return bool(backends.cuda.matmul.allow_tf32) or (
            torch.get_float32_matmul_precision() != "highest"
        )
    except RuntimeError:  # the state was set through fp32_precision
        chain = (
            [backends.cudnn.conv, backends.cudnn, backends]
            if convolution
            else [backends.cuda.matmul, backends]
        )
        chosen = [getattr(part, "fp32_precision", "none") for part in chain]
        return next((value for value in chosen if value != "none"), "ieee") == "tf32"


def device_precision(device: Any, dtype: str, convolution: bool) -> str:
    """The precision of a step on ``device`` (a ``torch.device``) whose FLOPs are mostly in
    ``dtype``, mostly in convolutions or not (:func:`precision_of`)."""
    if device.type != "cuda" or dtype != "float32":
        return precision_of(dtype)
    import torch

    capability = tuple(torch.cuda.get_device_capability(device))
    return precision_of(dtype, tf32=tf32_enabled(convolution), capability=capability)


def device_name(device: Any) -> str | None:
    """The GPU's name as torch gives it, None for another device."""
    if device.type != "cuda":
        return None
    import torch

    return str(torch.cuda.get_device_properties(device).name)


def device_peak(device: Any, precision: str) -> float | None:
    """The table's dense peak for ``device`` (a ``torch.device``) in ``precision``: the
    default ``pytest_hpml_peak_flops``. None off CUDA, and for a GPU or precision the table
    lacks."""
    if device.type != "cuda":
        return None
    import torch

    return peak_flops(torch.cuda.get_device_properties(device), precision)
