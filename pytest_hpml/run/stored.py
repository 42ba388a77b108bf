"""What a run stores, and what it says of the stored baselines of other machines: records
compacted for a baseline file, earlier runs kept beside the new one (``append``), each file's
header."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bench.metrics import is_sampled
from ..hardware import fingerprint
from ..model import Result
from ..verdict import baselines, stats
from ..verdict.judge import runs

MAX_STORED_SAMPLES = 400
EARLIER_RUNS = 6  # process runs kept besides the latest run's by --hpml-baseline=append
RUN_FIELDS = ("samples", "reference", "budget", "load", "free_cores", "state", "recorded", "commit")


def header(
    path: Path, entries: dict[str, dict[str, Any]], mine: fingerprint.Fingerprint
) -> dict[str, Any]:
    """What a baseline file says it holds: the machine, torch's version, or what its
    instruction counts depend on."""
    if path.name.startswith("portable-"):
        return {"torch": mine.torch_minor}
    if path.name.startswith("instructions-"):
        keys = {r.get("counted_on") for metrics in entries.values() for r in metrics.values()}
        return {"counted_on": min(k for k in keys if k)}
    return {"fingerprint": mine.as_dict()}


def other_machines(
    directory: Path, here: fingerprint.Fingerprint, results: Sequence[Result]
) -> str | None:
    """When sampled metrics found no baseline because this machine's fingerprint has no
    file but other machines' do: which, and how the nearest differs (another instance of
    this kind first: Note [Machine instance]); None otherwise."""
    mine = baselines.machine_path(directory, here)
    missing = any(
        is_sampled(r.metrics[name]) and v.verdict == stats.NO_BASELINE
        for r in results
        for name, v in r.verdicts.items()
    )
    if mine.exists() or not missing:
        return None
    stored, unread = [], []
    for path in sorted(directory.glob("machine-*.json")):
        try:
            theirs = fingerprint.Fingerprint.from_dict(baselines.load(path)["fingerprint"])
        except baselines.BaselineError as exc:  # said, not passed over
            unread.append(str(exc).removesuffix(f"; {baselines.FIX}"))  # not ours to fix
            continue
        except (KeyError, TypeError, AttributeError):
            unread.append(f"{path.name} names no machine (no fingerprint)")
            continue
        stored.append((here.differences(theirs), theirs, path.name))
    record = "record this machine's with --hpml-baseline=update"
    skipped = f"; skipped: {'; '.join(unread)}" if unread else ""
    if not stored:
        if not unread:
            return None
        return (
            f"no time baselines for this machine ({here.label}, id "
            f"{here.id}): times not judged, counts judged{skipped}; {record}"
        )
    same = [(theirs, name) for differences, theirs, name in stored if not differences]
    for theirs, name in same:
        if theirs.instance == here.instance:
            return (
                f"no time baselines under this machine's name ({mine.name}); {name} has "
                "this machine's fingerprint under another name (renamed?): times not judged"
            )
    if same:
        return (
            f"time baselines {same[0][1]} were recorded on another machine of this kind: "
            f"times not judged, counts judged; {record}{skipped}"
        )
    differences, _, name = min(stored, key=lambda found: len(found[0]))
    return (
        f"no time baselines for this machine ({here.label}, id "
        f"{here.id}): times not judged, counts judged; {len(stored)} other "
        f"machine(s) stored, the nearest {name}, which differs in {'; '.join(differences)}; "
        f"{record}, or key baselines your own way (pytest_hpml_fingerprint){skipped}"
    )


def append(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Keep earlier runs of a sampled metric beside the new one (a baseline pooled over
    processes is steadier than one process's); deterministic values are replaced."""
    if old is None or "samples" not in new or old.get("kind") != new.get("kind"):
        return new
    stamp = {k: old[k] for k in ("recorded", "commit") if k in old}
    earlier = [{**stamp, **{k: run[k] for k in RUN_FIELDS if k in run}} for run in runs(old)]
    return {**new, "earlier": earlier[:EARLIER_RUNS]}


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """What is stored: samples thinned evenly to at most MAX_STORED_SAMPLES a process run,
    5 digits each."""
    out = dict(record)
    out.pop("slices", None)  # a pair's, which thinning would misplace: no baseline has pairs
    if "processes" in out:
        out["processes"] = [compact(run) for run in out["processes"]]
    for key in ("samples", "reference"):
        values = out.get(key)
        if values:
            step = max(1, -(-len(values) // MAX_STORED_SAMPLES))
            out[key] = [float(f"{v:.5g}") for v in values[::step]]
    return out
