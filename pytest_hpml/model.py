"""The results a run passes between its layers, typed: one benchmark's :class:`Result`, with
its metrics' records and verdicts. Dicts only at the edges: :meth:`Result.to_dict` for the
JSON report and the wire (xdist, reruns), :meth:`Result.from_dict` to read them back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# A metric's record as the benchmark fixture made it (values, unit, kind, samples, runs): a
# dict still, as stored baselines and the wire hold it.
Record = dict[str, Any]
# A metric's verdict, as ``stats.Comparison`` gives it, in its JSON form.
VerdictData = dict[str, Any]


@dataclass
class Result:
    """What one benchmark measured and how each of its metrics was judged."""

    test: str  # the pytest node id
    threshold: float  # the relative change that counts, for its time metrics
    metrics: dict[str, Record] = field(default_factory=dict)
    verdicts: dict[str, VerdictData] = field(default_factory=dict)
    accepted: dict[str, dict[str, str]] = field(default_factory=dict)  # benchmark.expect_change
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # settings of other plugins overridden
    work_seconds: float = 0.0  # what counting its work cost
    instruction_seconds: float = 0.0
    uncounted: dict[str, str] = field(default_factory=dict)  # instruction metric: why not
    instructions: bool = True  # whether --hpml-instructions counts it
    no_peak: str | None = None  # why a step with FLOPs has no mfu

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the report and the wire hold it."""
        return {
            "test": self.test,
            "threshold": self.threshold,
            "metrics": self.metrics,
            "verdicts": self.verdicts,
            "accepted": self.accepted,
            "errors": self.errors,
            "notes": self.notes,
            "work_seconds": self.work_seconds,
            "instruction_seconds": self.instruction_seconds,
            "uncounted": self.uncounted,
            "instructions": self.instructions,
            "no_peak": self.no_peak,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        """A result read back from its JSON form; a report of an earlier version may lack the
        fields added since, which take their defaults."""
        return cls(
            test=data["test"],
            threshold=data.get("threshold", 0.0),
            metrics=dict(data.get("metrics") or {}),
            verdicts=dict(data.get("verdicts") or {}),
            accepted=dict(data.get("accepted") or {}),
            errors=list(data.get("errors") or ()),
            notes=list(data.get("notes") or ()),
            work_seconds=data.get("work_seconds") or 0.0,
            instruction_seconds=data.get("instruction_seconds") or 0.0,
            uncounted=dict(data.get("uncounted") or {}),
            instructions=data.get("instructions", True),
            no_peak=data.get("no_peak"),
        )


def results_of(document: Mapping[str, Any]) -> list[Result]:
    """The results of a JSON report (or of a merged one)."""
    return [Result.from_dict(r) for r in document.get("results") or ()]
