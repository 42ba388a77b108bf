"""Baseline storage: readable JSON files, merged and written atomically under a lock.

Time metrics live in one file per machine fingerprint (``machine-<name>-<id>.json``);
machine-independent metrics (FLOPs, parameters, graph breaks, tracked memory) in one file per
torch major.minor (``portable-torch2.14.json``). Each holds ``entries[test id][metric]``.
Writes take an exclusive lock, re-read the file, merge, and replace it atomically, so an
interrupted run never leaves a half-written file and pytest-xdist workers lose no entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from ..bench.metrics import kind_of
from ..config.options import number
from ..hardware.fingerprint import Fingerprint

FORMAT = "pytest-hpml-baselines/1"


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and how to fix it."""


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60]


def machine_path(directory: Path, fp: Fingerprint) -> Path:
    """The time-baseline file of this machine: found by its fingerprint id, whatever name it
    was recorded under (``--hpml-machine`` only labels it); a new one is named after it."""
    found = sorted(directory.glob(f"machine-*-{fp.id}.json"))
    return found[0] if found else directory / f"machine-{slug(fp.label)}-{fp.id}.json"


def portable_path(directory: Path, fp: Fingerprint) -> Path:
    return directory / f"portable-torch{fp.torch_minor}.json"


def instructions_path(directory: Path, counted_on: str) -> Path:
    """The instruction-count file of what such counts depend on (Note [Instruction counts])."""
    return directory / f"instructions-{slug(counted_on)}.json"


def load(path: Path) -> dict[str, Any]:
    """Read a baseline file; a missing one is empty, a broken one a :class:`BaselineError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {"format": FORMAT, "entries": {}}
    except OSError as exc:
        raise BaselineError(f"cannot read baseline file {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"baseline file {path} is not valid JSON ({exc.msg}: line {exc.lineno} column "
            f"{exc.colno}); fix it, or delete it and re-record with --hpml-baseline=update"
        ) from None
    problem = _shape_problem(data)
    if problem:
        raise BaselineError(
            f"baseline file {path} is not a pytest-hpml baseline ({problem}); fix it, or delete "
            "it and re-record with --hpml-baseline=update"
        )
    return data


def _shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "top level is not an object"
    if data.get("format") != FORMAT:
        return f"format is {data.get('format')!r}, expected {FORMAT!r}"
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return "'entries' is not an object"
    for test, metrics in entries.items():
        if not isinstance(metrics, dict) or not all(isinstance(m, dict) for m in metrics.values()):
            return f"entry {test!r} is not an object of metric objects"
    return None


def record_problem(record: dict[str, Any]) -> str | None:
    """What makes a stored metric record unusable (NaN, infinity, strings, zero times, an
    unknown kind), or None. Checked on every record read, so none is judged against."""
    kind = kind_of(record)
    if kind is None:
        return f"unknown kind {record.get('kind')!r}"
    if not kind.sampled:
        if not number(record.get("value")):
            return f"value {record.get('value')!r} is not a finite number"
        if not number(record.get("tolerance", 0.0)) or record.get("tolerance", 0.0) < 0:
            return f"tolerance {record.get('tolerance')!r} is not a number >= 0"
        return None
    others = [record.get(key, []) for key in ("processes", "earlier")]
    if not all(isinstance(runs, list) for runs in others):
        return "processes and earlier must be lists of process runs"
    for run in [record, *others[0], *others[1]]:
        if not isinstance(run, dict) or not isinstance(run.get("samples"), list):
            return "a process run is not an object with a list of samples"
        for key in ("samples", "reference"):
            values = run.get(key, [])
            if not isinstance(values, list) or not all(number(v, True) for v in values):
                return f"{key} must be a list of positive finite numbers"
    return None


def unusable(data: dict[str, Any]) -> list[str]:
    """Drop the unusable records of loaded baselines (``data["entries"]``); say which, and why."""
    said = []
    for test, metrics in data["entries"].items():
        for name in list(metrics):
            problem = record_problem(metrics[name])
            if problem:
                del metrics[name]
                said.append(f"entry {test!r} metric {name!r}: {problem}; not used")
    return said


def dumps(data: dict[str, Any]) -> str:
    """Stable, diff-friendly JSON: sorted keys, one metric per block, number lists on one line."""
    text = json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False)
    return (
        re.sub(
            r"\[\s*((?:-?[\d.eE+-]+,\s*)*-?[\d.eE+-]+)\s*\]",
            lambda m: "[" + ", ".join(part.strip() for part in m.group(1).split(",")) + "]",
            text,
        )
        + "\n"
    )


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock for the files of ``path``'s directory across processes (xdist
    workers): the directory itself is locked, so no lock file is left anywhere."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no flock; writes stay atomic but may race
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: readers see the old file or the new one. A
    link is followed: the file it points to is replaced, the link stays."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a baseline is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def merge(
    path: Path,
    updates: dict[str, dict[str, Any]],
    header: dict[str, Any],
    combine: Callable[[dict[str, Any] | None, dict[str, Any]], dict[str, Any]] | None = None,
) -> int:
    """Merge ``updates`` (test id -> metric -> record) into ``path``; return the entry count.

    Metrics and tests not in ``updates`` are kept; ``combine(old, new)`` decides what a metric
    that is already there becomes (default: the new record). A broken file is never overwritten.
    """
    path = Path(os.path.realpath(path))  # a linked file: update what it points to
    with locked(path):
        data = load(path)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a killed writer
            with contextlib.suppress(OSError):
                stale.unlink()
        entries = data["entries"]
        for test, metrics in updates.items():
            stored = entries.setdefault(test, {})
            for name, record in metrics.items():
                stored[name] = combine(stored.get(name), record) if combine else record
        data.update(header)
        data["format"] = FORMAT
        write_atomic(path, dumps(data))
        return len(entries)
