"""The machine fingerprint that time baselines are keyed by.

It covers what changes timings (CPU model and usable cores, GPU model and count, driver, CUDA,
torch and Python versions) and which machine of that kind this is (Note [Machine instance]), and
hashes to a short id; a human-readable name goes with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..config.values import usable_cpus

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
    instance: str | None = None  # which machine of this kind (Note [Machine instance])

    @property
    def id(self) -> str:
        """A short hash of the timing-relevant fields (not the name; the CPU without its stated
        clock: Note [CPU clock]) and of the instance, where known."""
        fields = {f: self._relevant(f) for f in FIELDS}
        if self.instance is not None:  # None: the ids of fingerprints made without one stay
            fields["instance"] = self.instance
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def kind(self) -> str:
        """The id of this machine's kind: every timing-relevant field, not the instance."""
        return dataclasses.replace(self, instance=None).id

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

    def same_kind(self, other: Fingerprint) -> bool:
        """Whether ``other`` is a machine of this kind, another instance of it or this one."""
        return not self.differences(other)

    def with_name(self, name: str) -> Fingerprint:
        """The same machine under a human-readable name (``--hpml-machine``)."""
        return dataclasses.replace(self, name=name)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        values: dict[str, Any] = {f: data.get(f) for f in FIELDS}
        values["gpus"] = tuple(values["gpus"] or ())
        instance = data.get("instance")
        return cls(
            **values,
            name=data.get("name", ""),
            instance=instance if isinstance(instance, str) else None,
        )


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


# Where Linux keeps the id of an installation (systemd's machine-id(5)), in the order read.
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
CONTAINER_FILES = ("/.dockerenv", "/run/.containerenv")


def instance(named: str = "") -> str:
    """Which machine of its kind this is, as a short hash (Note [Machine instance]): of
    ``named`` (--hpml-machine-id) where given; else of the installation's machine id, with the
    boot's id inside a container (whose machine id is its image's); else of the host name."""
    if named:
        source = f"named {named}"
    else:
        parts = [_first_line(MACHINE_ID_FILES)]
        if any(os.path.exists(path) for path in CONTAINER_FILES):
            parts.append(_first_line((BOOT_ID_FILE,)))
        source = " ".join(p for p in parts if p) or f"host {platform.node()}"
    # app-specific, as systemd asks: the machine id itself is never written anywhere
    return hashlib.sha256(f"pytest-hpml machine instance: {source}".encode()).hexdigest()[:12]


def _first_line(paths: tuple[str, ...]) -> str:
    """The first line of the first of ``paths`` that holds one, else ""."""
    for path in paths:
        try:
            with open(path, encoding="ascii", errors="replace") as file:
                line = file.readline(256).strip()
        except OSError:
            continue
        if line:
            return line
    return ""


def current(hardware: Any, name: str = "", named_instance: str = "") -> Fingerprint:
    """This machine's fingerprint; ``hardware`` is the session's :class:`~.devices.Hardware`,
    ``named_instance`` what --hpml-machine-id says this machine is.

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
        instance=instance(named_instance),
    )
