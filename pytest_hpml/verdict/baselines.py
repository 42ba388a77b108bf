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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from ..bench.metrics import is_sampled, kind_of
from ..config.values import number, shown
from ..hardware.fingerprint import Fingerprint
from ..storage import reader, writer
from ..storage.reader import at

FORMAT = "pytest-hpml-baselines/1"
FIX = "fix it, or delete it and re-record with --hpml-baseline=update"


class BaselineError(reader.Unreadable):
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
    if path.parent.exists() and not path.parent.is_dir():
        raise BaselineError(f"the baseline directory {path.parent} is a file, not a directory")
    try:
        data: dict[str, Any] = reader.read_json(path, "baseline file")
    except FileNotFoundError:
        return {"format": FORMAT, "entries": {}}
    except reader.Unreadable as exc:
        raise BaselineError(f"{exc}; {FIX}") from None
    problem = _shape_problem(data)
    if problem:
        raise BaselineError(
            f"baseline file {path} is not a pytest-hpml baseline ({problem}); {FIX}"
        )
    problem = _machine_problem(path, data) or _portable_problem(path, data)
    if problem:
        raise BaselineError(f"baseline file {path}: {problem}")
    return data


_MACHINE_FILE = re.compile(r"machine-.*-([0-9a-f]{12})\.json")


def _machine_problem(path: Path, data: dict[str, Any]) -> str | None:
    """Why a machine file cannot be this machine's where its name says so: another file names
    the same machine, or the fingerprint inside is another machine's."""
    named = _MACHINE_FILE.fullmatch(path.name)
    if named is None:
        return None
    same = sorted(p.name for p in path.parent.glob(f"machine-*-{named.group(1)}.json"))
    if len(same) > 1:
        return (
            f"{' and '.join(same)} both name machine {named.group(1)}: which one holds its "
            "times is not known; keep one, delete the other"
        )
    recorded = data.get("fingerprint", {}).get("id")
    if recorded is not None and recorded != named.group(1):
        return (
            f"its name says machine {named.group(1)}, its fingerprint {shown(repr(recorded))}; "
            "rename it after its fingerprint, or delete it and record again"
        )
    return None


_PORTABLE_FILE = re.compile(r"portable-torch(\d+\.\d+)\.json")


def _portable_problem(path: Path, data: dict[str, Any]) -> str | None:
    """Why a portable file cannot be read as its name says: it says another torch, or it
    holds a time, which is one machine's (Note [Files])."""
    named = _PORTABLE_FILE.fullmatch(path.name)
    if named is None:
        return None
    recorded = data.get("torch")
    if recorded is not None and recorded != named.group(1):
        return (
            f"its name says torch {named.group(1)}, its torch field {shown(repr(recorded))}; "
            "rename it after its torch, or delete it and record again"
        )
    for test, metrics in data["entries"].items():
        for name, record in metrics.items():
            if is_sampled(record):
                return (
                    f"{at('entries', test, name)} is a {record.get('kind')}, which one machine "
                    "measures; a portable file holds counts only: delete that entry"
                )
    return None


def is_baseline(path: Path) -> bool:
    """Whether ``path`` is a file that says it is a baseline file (readable or not)."""
    try:
        return reader.read_text(path, "file").find(f'"{FORMAT}"') >= 0
    except (OSError, reader.Unreadable):
        return False


def _shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "its top level is not an object"
    if data.get("format") != FORMAT:
        return f"format is {data.get('format')!r}, expected {FORMAT!r}"
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return "entries is not an object"
    if not isinstance(data.get("fingerprint", {}), dict):
        return f"fingerprint is {data['fingerprint']!r}, not an object"
    for test, metrics in entries.items():
        if not isinstance(metrics, dict):
            return f"{at('entries', test)} is not an object of metrics"
        for name, record in metrics.items():
            if not isinstance(record, dict):
                return f"{at('entries', test, name)} is not an object"
    return None


def record_problem(record: dict[str, Any], stored: bool = False) -> str | None:
    """What makes a metric record unusable (NaN, infinity, strings, zero times, an unknown
    kind, and, ``stored`` in a baseline, no samples at all), or None, naming the bad field.
    Checked on every record read, so none is judged against."""
    kind = kind_of(record)
    if kind is None:
        return f"unknown kind {record.get('kind')!r}"
    if not kind.sampled:
        if not number(record.get("value")):
            return f"value {record.get('value')!r} is not a finite number"
        if not number(record.get("tolerance", 0.0)) or record.get("tolerance", 0.0) < 0:
            return f"tolerance {record.get('tolerance')!r} is not a number >= 0"
        return None
    if kind.name == "time" and record.get("unit", "s") != "s":  # read as seconds regardless
        return f"unit {record.get('unit')!r}: a time is stored in seconds ('s')"
    for key in ("processes", "earlier"):
        if not isinstance(record.get(key, []), list):
            return f"processes and earlier must be lists of process runs: {key} is not a list"
    runs = [((), record)] + [
        ((key, i), run)
        for key in ("processes", "earlier")
        for i, run in enumerate(record.get(key, []))
    ]
    for where, run in runs:
        problem = _run_problem(where, run)
        if problem:
            return problem
    if stored and not record["samples"]:
        return "samples is empty: a baseline without samples cannot be judged against"
    return None


# The fields of a sampled record besides its samples, and what each must be if present.
_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "unit": ("text", lambda v: isinstance(v, str)),
    "iterations": ("a whole number >= 1", lambda v: _whole(v) and v >= 1),
    "warmup_calls": ("a whole number >= 0", lambda v: _whole(v) and v >= 0),
    "budget": ("a positive number or null", lambda v: v is None or number(v, True)),
    "load": ("a number >= 0 or null", lambda v: v is None or (number(v) and v >= 0)),
    "first_call": ("a positive number or null", lambda v: v is None or number(v, True)),
}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _run_problem(where: tuple[Any, ...], run: Any) -> str | None:
    """What is wrong with one process run of a sampled record (``where`` in it), or None."""
    if not isinstance(run, dict):
        return f"a process run is not an object: {at('', *where) or 'the record'}"
    if not isinstance(run.get("samples"), list):
        found = "missing" if "samples" not in run else f"a {type(run['samples']).__name__}"
        field = at("", *where, "samples")
        return f"samples must be a list of positive finite numbers: {field} is {found}"
    for key in ("samples", "reference"):
        values = run.get(key, [])
        if not isinstance(values, list):
            return (
                f"{key} must be a list of positive finite numbers: {at('', *where, key)} is a "
                f"{type(values).__name__}"
            )
        for i, value in enumerate(values):
            if not number(value, True):
                return (
                    f"{key} must be a list of positive finite numbers: "
                    f"{at('', *where, key, i)} is {value!r}"
                )
    for key, (what, ok) in _FIELDS.items():
        if key in run and not ok(run[key]):
            return f"{at('', *where, key)} is {run[key]!r}, not {what}"
    return None


def unusable(data: dict[str, Any]) -> list[str]:
    """Drop the unusable records of loaded baselines (``data["entries"]``); say which, and why."""
    said = []
    if "" in data["entries"]:
        del data["entries"][""]
        said.append('entries[""]: an entry without a test id; not used')
    for test, metrics in data["entries"].items():
        for name in list(metrics):
            problem = record_problem(metrics[name], stored=True)
            if problem:
                del metrics[name]
                said.append(f"{at('entries', test, name)}: {problem}; not used")
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


def merge(
    path: Path,
    updates: dict[str, dict[str, Any]],
    header: dict[str, Any],
    combine: Callable[[dict[str, Any] | None, dict[str, Any]], dict[str, Any]] | None = None,
    root: Path | None = None,
) -> int:
    """Merge ``updates`` (test id -> metric -> record) into ``path``; return the entry count.

    Metrics and tests not in ``updates`` are kept; ``combine(old, new)`` decides what a metric
    that is already there becomes (default: the new record), and an unusable one it would
    combine with is an error. A broken file is never overwritten; nor is a read-only one, or one
    that ``path``, inside ``root``, reaches through a link out of it (:mod:`..storage.writer`).
    """
    refused = writer.problem(path, root)
    if refused:
        raise writer.Refused(f"{path} {refused}")
    path = Path(os.path.realpath(path))  # a linked file: update what it points to
    with locked(path):
        data = load(path)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a killed writer
            with contextlib.suppress(OSError):
                stale.unlink()
        entries = data["entries"]
        if combine is not None:
            _combinable(path, entries, updates)
        for test, metrics in updates.items():
            stored = entries.setdefault(test, {})
            for name, record in metrics.items():
                stored[name] = combine(stored.get(name), record) if combine else record
        data.update(header)
        data["format"] = FORMAT
        writer.replace(path, dumps(data))
        return len(entries)


def _combinable(path: Path, entries: dict[str, Any], updates: dict[str, dict[str, Any]]) -> None:
    """Refuse to add runs to a stored record that is unusable: the file would say "recorded"
    and the next comparison reject it."""
    for test, metrics in updates.items():
        for name in metrics:
            old = entries.get(test, {}).get(name)
            problem = None if old is None else record_problem(old)
            if problem:
                raise BaselineError(
                    f"baseline file {path}: {at('entries', test, name)}: {problem}; nothing can "
                    f"be appended to it: {FIX}"
                )
