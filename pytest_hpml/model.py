"""The results a run passes between its layers, typed: one benchmark's :class:`Result`, with
its metrics' records and their :class:`Comparison` verdicts. Dicts only at the edges:
``to_dict`` for the JSON report and the wire (xdist, reruns), ``from_dict`` to read them back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# A metric's record as the benchmark fixture made it (values, unit, kind, samples, runs): a
# dict still, as stored baselines and the wire hold it.
Record = dict[str, Any]


@dataclass(frozen=True)
class Comparison:
    """The verdict on one metric, with what it rests on."""

    verdict: str
    baseline: float | None = None
    current: float | None = None
    change: float | None = None  # relative: +0.15 means 15% higher than the baseline
    confidence: float | None = None  # 1 - p of the one-sided test in the direction of change
    threshold: float | None = None
    reason: str = ""
    raw_change: float | None = None  # before normalization by the reference, when it applies
    pairs: tuple[float, ...] | None = None  # --hpml-against: head/base ratio of each pair
    sides: dict[str, tuple[float, ...]] | None = None  # --hpml-against: each process's value
    # torch's state each side measured in, its distinct ones (Note [Torch state])
    states: dict[str, list[dict[str, Any]]] | None = None
    # --hpml-against: the change's interval at the level of one look (Note [Adaptive pairs])
    interval: tuple[float, float] | None = None
    # --hpml-against: the degrees of freedom of the t test behind ``interval``
    degrees: float | None = None
    # --hpml-against: the interval at the level of each look alone, which settles a pass
    # (Note [Adaptive pairs])
    settling: tuple[float, float] | None = None
    # the verdict and reason before the session-wide control changed them (Note [Sharded
    # runs]): what `pytest-hpml merge` takes the control again from
    before: Earlier | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the report and the wire hold it."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "before"}
        data["pairs"] = None if self.pairs is None else list(self.pairs)
        data["interval"] = None if self.interval is None else list(self.interval)
        data["settling"] = None if self.settling is None else list(self.settling)
        if self.sides is not None:
            data["sides"] = {side: list(values) for side, values in self.sides.items()}
        if self.before is not None:
            data[BEFORE_CONTROL] = {"verdict": self.before.verdict, "reason": self.before.reason}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """A verdict read back from its JSON form; a field a report lacks takes its default."""
        found = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        for name in ("pairs", "interval", "settling"):
            if found.get(name) is not None:
                found[name] = tuple(found[name])
        if found.get("sides") is not None:
            found["sides"] = {side: tuple(values) for side, values in found["sides"].items()}
        earlier = data.get(BEFORE_CONTROL)
        if isinstance(earlier, Mapping):
            found["before"] = Earlier(earlier.get("verdict", ""), earlier.get("reason", ""))
        else:
            found.pop("before", None)
        return cls(**found)


@dataclass(frozen=True)
class Earlier:
    """A verdict and its reason as its test's run found them, before the session-wide steps."""

    verdict: str
    reason: str


# The JSON key of :attr:`Comparison.before`.
BEFORE_CONTROL = "before_control"


@dataclass
class Result:
    """What one benchmark measured and how each of its metrics was judged."""

    test: str  # the pytest node id
    threshold: float  # the relative change that counts, for its time metrics
    metrics: dict[str, Record] = field(default_factory=dict)
    verdicts: dict[str, Comparison] = field(default_factory=dict)
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
            "verdicts": {name: verdict.to_dict() for name, verdict in self.verdicts.items()},
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
            verdicts={
                name: Comparison.from_dict(verdict)
                for name, verdict in (data.get("verdicts") or {}).items()
            },
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
