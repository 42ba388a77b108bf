"""The machine fingerprint that time baselines are keyed by.

It covers what changes timings (CPU model and usable cores, GPU model and count, driver, CUDA,
torch and Python versions) and hashes to a short id; a human-readable name goes with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..config.options import usable_cpus

FIELDS = ("cpu", "cores", "gpus", "driver", "cuda", "torch", "python", "system")


@dataclass(frozen=True)
class Fingerprint:
    cpu: str
    cores: int
    gpus: tuple[str, ...]
    driver: str | None
    cuda: str | None
    torch: str
    python: str
    system: str
    name: str = ""

    @property
    def id(self) -> str:
        """A short hash of the timing-relevant fields (not the name; the CPU without its stated
        clock: Note [CPU clock])."""
        blob = json.dumps({f: self._relevant(f) for f in FIELDS}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def _relevant(self, field: str) -> Any:
        value = getattr(self, field)
        return cpu_without_clock(value) if field == "cpu" else value

    @property
    def torch_minor(self) -> str:
        """``2.14`` for torch ``2.14.1+cu130``: the key of machine-independent baselines."""
        return ".".join(re.split(r"[.+]", self.torch)[:2])

    @property
    def label(self) -> str:
        return self.name or default_name(self)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        data["id"] = self.id
        data["name"] = self.label
        return data

    def differences(self, other: Fingerprint) -> list[str]:
        """The timing-relevant fields in which ``other`` differs, as "cpu: 'A' here, 'B'"."""
        return [
            f"{f}: {getattr(self, f)!r} here, {getattr(other, f)!r} there"
            for f in FIELDS
            if self._relevant(f) != other._relevant(f)
        ]

    def with_name(self, name: str) -> Fingerprint:
        """The same machine under a human-readable name (``--hpml-machine``)."""
        return dataclasses.replace(self, name=name)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        values = {f: data.get(f) for f in FIELDS}
        values["gpus"] = tuple(values["gpus"] or ())
        return cls(**values, name=data.get("name", ""))


def cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo), else what platform reports."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return (match.group(1).strip() if match else platform.processor()) or platform.machine()


def cpu_without_clock(cpu: str) -> str:
    """``Intel(R) Xeon(R) Processor`` for ``Intel(R) Xeon(R) Processor @ 2.80GHz``: the same
    virtual CPU states its clock or not from one boot to the next (Note [CPU clock])."""
    return re.sub(r"\s*@\s*[\d.]+\s*[GM]Hz\s*$", "", cpu, flags=re.IGNORECASE)


def default_name(fp: Fingerprint) -> str:
    cpu = re.sub(r"\s+(\d+-Core Processor|CPU @.*|Processor)$", "", fp.cpu)
    gpus = f", {len(fp.gpus)}x {fp.gpus[0]}" if fp.gpus else ""
    return f"{cpu} ({fp.cores} cores){gpus}, torch {fp.torch}"


def current(hardware: Any, name: str = "") -> Fingerprint:
    """This machine's fingerprint; ``hardware`` is the session's :class:`~.devices.Hardware`.

    Found without importing torch while it is not loaded (a run of pure-Python benchmarks
    would pay seconds for it): the versions come from torch's files, the GPUs from a probe."""
    version, cuda = hardware.torch_version
    return Fingerprint(
        cpu=cpu_model(),
        cores=usable_cpus(),
        gpus=tuple(g.name for g in hardware.gpus),
        driver=hardware.driver,
        cuda=cuda if hardware.gpus else None,
        torch=version,
        python=".".join(platform.python_version_tuple()[:2]),
        system=f"{platform.system()}-{platform.machine()}",
        name=name,
    )
