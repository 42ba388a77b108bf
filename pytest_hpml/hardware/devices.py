"""What hardware torch sees, found without creating a CUDA context in the pytest process.

A CUDA context in the parent breaks a later ``fork`` of ranks or DataLoader workers, so GPU
counting uses ``torch.cuda.device_count()`` (NVML-based, no context) and the details (names,
memory, compute capability) come from a short-lived subprocess, once per session.

What the machine fingerprint needs (torch's version, the GPUs and their driver) is found
without importing torch here while it is not loaded: that subprocess counts the GPUs too, so a
run of pure-Python benchmarks pays neither torch's import time nor its memory.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from .. import _compat
from ..config.role import settings

_PROBE = """
import json, torch
try:
    import pynvml
    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
except Exception:
    driver = None
gpus = []
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    gpus.append({"index": i, "name": p.name, "total_memory": p.total_memory,
                 "capability": [p.major, p.minor]})
print(json.dumps({"gpus": gpus, "driver": driver}))
"""


@dataclass(frozen=True)
class GpuInfo:
    """One visible CUDA device."""

    index: int
    name: str
    total_memory: int
    capability: tuple[int, int]

    @property
    def memory_gb(self) -> float:
        return self.total_memory / 2**30

    def describe(self) -> str:
        major, minor = self.capability
        return f"{self.name} (sm_{major}{minor}, {self.memory_gb:.1f} GiB)"


def import_torch() -> Any:
    """Import torch, or stop the run with a usage error saying how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise pytest.UsageError(
            f"pytest-hpml needs torch, which cannot be imported ({exc}); "
            "install it (pip install torch) or disable the plugin with -p no:hpml"
        ) from None
    return torch


def may_have_gpus() -> bool:
    """False on Linux without an NVIDIA device node, where torch would count no CUDA device;
    elsewhere only torch can tell."""
    return not sys.platform.startswith("linux") or any(Path("/dev").glob("nvidia[0-9]*"))


def device_count() -> int:
    """How many CUDA devices torch sees, without a CUDA context (NVML): the discovery layer.

    On Linux, a machine without an NVIDIA device node has none, and torch is not imported.
    """
    if not may_have_gpus():
        return 0
    torch = import_torch()
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


class Hardware:
    """Lazily gathered facts about the devices torch can use; one per session."""

    @cached_property
    def torch(self) -> Any:
        return import_torch()

    @cached_property
    def torch_version(self) -> tuple[str, str | None]:
        """``torch.__version__`` and ``torch.version.cuda``, torch imported for them only if it
        is loaded already or its files cannot be read."""
        return _compat.torch_version_info(import_torch)

    @cached_property
    def cuda_count(self) -> int:
        return device_count()

    @cached_property
    def gpus(self) -> tuple[GpuInfo, ...]:
        return tuple(
            GpuInfo(g["index"], g["name"], g["total_memory"], tuple(g["capability"]))
            for g in self._probe.get("gpus", ())
        )

    @property
    def driver(self) -> str | None:
        """The NVIDIA driver version (None without GPUs or NVML)."""
        return self._probe.get("driver")

    @cached_property
    def _probe(self) -> dict[str, Any]:
        if "torch" not in sys.modules and may_have_gpus():
            found = self._probe_counting()
            if found is not None:
                return found
        if not self.cuda_count:
            return {}
        out = _run_probe()
        if out.returncode:
            # Torch counted GPUs but cannot open them (driver mismatch, GPU busy in exclusive mode).
            raise pytest.UsageError(
                f"torch counts {self.cuda_count} CUDA device(s) but cannot query them: "
                + (out.stderr.strip().splitlines() or ["no output"])[-1]
            )
        return _probed(out)

    def _probe_counting(self) -> dict[str, Any] | None:
        """The probe's findings where it counts the GPUs too, torch not being loaded here
        (importing it only to count costs seconds and hundreds of MiB); None if it failed:
        counting here then says why."""
        out = _run_probe()
        if out.returncode:
            return None
        found = _probed(out)
        # No GPU counted, no driver: what counting here gives when torch sees none.
        return found if found["gpus"] else {}

    @cached_property
    def mps(self) -> bool:
        return bool(self.torch.backends.mps.is_available())

    def visible_devices(self) -> str:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
        return "CUDA_VISIBLE_DEVICES unset" if value is None else f"CUDA_VISIBLE_DEVICES={value!r}"

    def torch_build(self) -> str:
        cuda = self.torch.version.cuda
        return f"torch {self.torch.__version__}" + (f" (CUDA {cuda})" if cuda else " (no CUDA)")

    def resolve(self, spec: str) -> str:
        """Turn ``auto`` into the best device here; other specs pass through unchanged."""
        if spec != "auto":
            return spec
        if self.cuda_count:
            return "cuda"
        return "mps" if self.mps else "cpu"

    def unavailable(self, device: str) -> str | None:
        """Why ``device`` cannot be used here, or None when it can."""
        kind, _, index = device.partition(":")
        if kind == "cuda":
            wanted = int(index or 0) + 1
            if self.cuda_count < wanted:
                return (
                    f"--hpml-device={device} asked for {wanted} CUDA device(s) but "
                    f"{self.torch_build()} sees {self.cuda_count} ({self.visible_devices()}); "
                    "run where an NVIDIA GPU and driver are visible, or use --hpml-device=cpu "
                    "(or auto)"
                )
        if kind == "mps" and not self.mps:
            return (
                f"--hpml-device={device}: {self.torch_build()} reports MPS unavailable "
                "(needs Apple silicon and macOS 12.3+); use --hpml-device=cpu (or auto)"
            )
        return None

    def describe(self) -> str:
        """One line: torch build and the devices it sees."""
        if self.gpus:
            names = "; ".join(f"cuda:{g.index} {g.describe()}" for g in self.gpus)
            seen = f"{len(self.gpus)} GPU(s): {names}"
        else:
            seen = f"no CUDA GPU ({self.visible_devices()})"
        if self.mps:
            seen += ", mps"
        return f"{self.torch_build()}, {seen}"


def _run_probe() -> Any:
    """Run the probe in a fresh interpreter: a CUDA context there leaves this process free to
    fork."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120
    )


def _probed(out: Any) -> dict[str, Any]:
    """The probe's findings: the last line it printed."""
    import json

    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


HARDWARE_KEY = pytest.StashKey[Hardware]()


def hardware(config: pytest.Config) -> Hardware:
    """The session's :class:`Hardware`, created on first use."""
    return config.stash.setdefault(HARDWARE_KEY, Hardware())


def devices(config: pytest.Config) -> list[str]:
    """The selected devices (``--hpml-device``) with ``auto`` resolved, without duplicates."""
    hw = hardware(config)
    return list(dict.fromkeys(hw.resolve(spec) for spec in settings(config).devices))
