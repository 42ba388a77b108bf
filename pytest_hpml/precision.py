"""The ``precision`` fixture's value: dtype, autocast, tolerances and TF32 flags."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .devices import Hardware

# (rtol, atol) for comparing a result computed in this precision against the fp32 one. fp32 is
# looser than torch.testing's default so that the same model on another device still compares.
TOLERANCES = {
    "fp32": (1e-5, 1e-5),
    "tf32": (1e-2, 1e-2),
    "fp16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
}
_LOW_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# What each precision does to TF32 while its test runs: fp32 means true IEEE fp32 (cuDNN would
# otherwise use TF32 by default); mixed precisions leave the flags as the user set them.
_TF32 = {"fp32": False, "tf32": True}


@dataclass(frozen=True)
class Precision:
    """One numeric precision, bound to the device the test runs on."""

    name: str
    device: torch.device

    def __str__(self) -> str:
        return self.name

    @property
    def is_mixed(self) -> bool:
        """True for fp16/bf16, which run under autocast."""
        return self.name in _LOW_DTYPES

    @property
    def dtype(self) -> torch.dtype:
        """The low-precision dtype for fp16/bf16; float32 for fp32 and tf32."""
        import torch

        return getattr(torch, _LOW_DTYPES.get(self.name, "float32"))

    @property
    def rtol(self) -> float:
        return TOLERANCES[self.name][0]

    @property
    def atol(self) -> float:
        return TOLERANCES[self.name][1]

    def autocast(self, device: torch.device | str | None = None, **kwargs: Any) -> Any:
        """``torch.autocast`` for fp16/bf16 on the test's device; a no-op for fp32/tf32."""
        import torch

        if not self.is_mixed:
            return contextlib.nullcontext()
        device_type = torch.device(device or self.device).type
        return torch.autocast(device_type, dtype=self.dtype, **kwargs)

    def assert_close(self, actual: Any, expected: Any, **kwargs: Any) -> None:
        """``torch.testing.assert_close`` with this precision's tolerances (fp32 reference).

        Both sides are compared in float32, so a low-precision result may be checked against
        its fp32 reference directly.
        """
        import torch

        kwargs.setdefault("rtol", self.rtol)
        kwargs.setdefault("atol", self.atol)
        kwargs.setdefault("check_dtype", False)
        kwargs.setdefault("check_device", False)
        torch.testing.assert_close(_as_fp32(actual), _as_fp32(expected), **kwargs)

    def unsupported(self, hardware: Hardware) -> str | None:
        """Why this precision cannot run on its device, or None when it can."""
        kind = self.device.type
        if self.name == "tf32" and kind != "cuda":
            return f"tf32 is a CUDA mode (compute capability >= 8.0); on {kind} it is plain fp32"
        if self.name in ("tf32", "bf16") and kind == "cuda":
            gpu = hardware.gpus[self.device.index or 0]
            if gpu.capability < (8, 0):
                major, minor = gpu.capability
                return (
                    f"{self.name} needs compute capability >= 8.0; {self.device} is "
                    f"{gpu.name} (sm_{major}{minor})"
                )
        if self.name == "bf16" and kind == "mps":
            import torch

            if not torch.backends.mps.is_macos_or_newer(14, 0):
                return "bf16 on mps needs macOS 14 or newer"
        return None

    @contextlib.contextmanager
    def flags(self) -> Iterator[None]:
        """Set the TF32 flags this precision implies, restoring the previous ones after."""
        enabled = _TF32.get(self.name)
        if enabled is None:
            yield
            return
        with tf32(enabled):
            yield


def _as_fp32(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.float()
    if isinstance(value, (list, tuple)):
        return type(value)(_as_fp32(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_fp32(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Turn TF32 for CUDA matmul and cuDNN on or off, then restore what was there.

    torch >= 2.9 raises if the legacy ``allow_tf32`` flags are read after its newer
    ``fp32_precision`` API was used, so whichever API the previous state came from is used to
    put it back.
    """
    import torch

    backends = torch.backends
    saved = _save_tf32(backends)
    try:
        backends.cuda.matmul.allow_tf32 = enabled
        backends.cudnn.allow_tf32 = enabled
        yield
    finally:
        kind, matmul, cudnn = saved
        if kind == "legacy":
            backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = matmul, cudnn
        else:
            backends.cuda.matmul.fp32_precision = matmul
            backends.cudnn.conv.fp32_precision = cudnn


def _save_tf32(backends: Any) -> tuple[str, Any, Any]:
    try:
        return "legacy", backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32
    except RuntimeError:  # the state was set through fp32_precision
        return (
            "fp32_precision",
            backends.cuda.matmul.fp32_precision,
            backends.cudnn.conv.fp32_precision,
        )
