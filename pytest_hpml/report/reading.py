"""Reading a JSON report back, as ``pytest-hpml`` does: every value from a file is untrusted,
so each is checked before a command uses it, and a bad file is one clear error."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config.values import number
from ..storage import reader
from ..verdict import baselines, policy, stats
from ..verdict.baselines import BaselineError
from . import files


def existing(path: Path) -> Path:
    """``baselines.load`` treats a missing file as empty; asked for by name, it is an error."""
    if path.is_dir():
        raise BaselineError(f"{path} is a directory; name a baseline file or a JSON report in it")
    if path.exists() and not path.is_file():
        raise BaselineError(f"{path} is not a regular file; name a baseline file or a report")
    if not path.exists():
        raise BaselineError(f"no such file: {path}")
    return path


def report_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "top level is not an object"
    if data.get("format") != files.REPORT_FORMAT:
        return f"format is {data.get('format')!r}, expected {files.REPORT_FORMAT!r}"
    for key, kinds in _REPORT_FIELDS.items():
        if not isinstance(data.get(key), kinds):
            return f"{key} is {type(data.get(key)).__name__}, not {_names(kinds)}"
    fingerprint = {k: v for k, v in data["fingerprint"].items() if k in ("name", "id")}
    if not all(isinstance(v, str) for v in fingerprint.values()):
        return "fingerprint.name and fingerprint.id must be text"
    if not all(isinstance(e, str) for e in data.get("errors") or ()):
        return "errors must be a list of text"
    results = data.get("results")
    if not isinstance(results, list):
        return "'results' is not a list"
    for result in results:
        keys = ("test", "metrics", "verdicts")
        if not isinstance(result, dict) or not all(k in result for k in keys):
            return "a result lacks its test, metrics or verdicts"
        problem = _result_problem(result)
        if problem:
            return f"result {str(result['test'])[:80]!r}: {problem}"
    return None


# The fields of a report besides its results, and what each may be (None: absent or null).
_REPORT_FIELDS: dict[str, tuple[type, ...]] = {
    "fingerprint": (dict,),
    "commit": (str, type(None)),
    "baseline_mode": (str, type(None)),
    "baseline_dir": (str, type(None)),
    "errors": (list, type(None)),
    "against": (dict, type(None)),
    "instructions": (dict, type(None)),
    "counters": (str, type(None)),
    "control": (dict, type(None)),
}


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(
        "null" if k is type(None) else "an object" if k is dict else k.__name__ for k in kinds
    )


def finite_or_infinite(value: Any) -> bool:
    return number(value) or (isinstance(value, float) and math.isinf(value))


# A verdict's numeric fields: a number or null, nothing else.
_VERDICT_NUMBERS = (
    "baseline",
    "current",
    "change",
    "confidence",
    "threshold",
    "raw_change",
    "degrees",
)


def _result_problem(result: dict[str, Any]) -> str | None:
    """What is wrong with one result of a report: every value read from a file is untrusted."""
    metrics, verdicts = result["metrics"], result["verdicts"]
    if not isinstance(result["test"], str):
        return "its test id is not a string"
    if not isinstance(metrics, dict) or not isinstance(verdicts, dict):
        return "its metrics or verdicts are not objects"
    for name, record in metrics.items():
        if not isinstance(record, dict) or not isinstance(record.get("unit", ""), str):
            return f"metric {name!r} is not a record with a text unit"
        problem = baselines.record_problem(record)
        if problem:
            return f"metric {name!r}: {problem}"
    for name, verdict in verdicts.items():
        if name not in metrics or not isinstance(verdict, dict):
            return f"verdict {name!r} has no metric"
        if verdict.get("verdict") not in stats.VERDICTS:
            return f"verdict {name!r} is {verdict.get('verdict')!r}, not one of {stats.VERDICTS}"
        numbers = [verdict.get(key) for key in _VERDICT_NUMBERS]
        # a count that grows from 0 changes by +inf: only NaN and non-numbers are refused
        if not all(v is None or finite_or_infinite(v) for v in numbers):
            return f"verdict {name!r} has a value that is not a number"
        if not isinstance(verdict.get("reason", ""), str):
            return f"verdict {name!r} has a reason that is not text"
        if not _sides_ok(verdict.get("sides")):
            return f"verdict {name!r}: its sides are not head's and base's positive values, paired"
        if not _before_ok(verdict.get(policy.BEFORE_CONTROL)):
            return f"verdict {name!r}: {policy.BEFORE_CONTROL} is not a verdict and its reason"
        for key in _VERDICT_LISTS:
            if not _numbers_or_none(verdict.get(key)):
                return f"verdict {name!r}: its {key} is not a list of numbers"
    return _fields_problem(result)


# A verdict's lists (head against base): the pairs' ratios and the two intervals.
_VERDICT_LISTS = ("pairs", "interval", "settling")
# A result's other fields, and what each may be (absent or null as well).
_RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "accepted": (dict,),
    "uncounted": (dict,),
    "errors": (list,),
    "notes": (list,),
    "threshold": (int, float),
    "work_seconds": (int, float),
    "instruction_seconds": (int, float),
    "instructions": (bool,),
    "no_peak": (str,),
}


def _numbers_or_none(values: Any) -> bool:
    return values is None or (isinstance(values, list) and all(map(finite_or_infinite, values)))


def _fields_problem(result: dict[str, Any]) -> str | None:
    """What is wrong with a result's fields besides its metrics and verdicts: read back into
    a ``model.Result``, each must be what the plugin writes."""
    for key, kinds in _RESULT_FIELDS.items():
        value = result.get(key)
        if value is not None and (
            not isinstance(value, kinds) or isinstance(value, bool) is not (bool in kinds)
        ):
            return f"its {key} is {type(value).__name__}, not {_names(kinds)}"
    if not all(
        isinstance(e, str) for e in (*(result.get("errors") or ()), *(result.get("notes") or ()))
    ):
        return "its errors and notes must be lists of text"
    return None


def _before_ok(before: Any) -> bool:
    """What a verdict was before the session-wide control changed it (or none)."""
    if before is None:
        return True
    return (
        isinstance(before, dict)
        and set(before) == {"verdict", "reason"}
        and before["verdict"] in stats.VERDICTS
        and isinstance(before["reason"], str)
    )


def _sides_ok(sides: Any) -> bool:
    """A head-against-base verdict's values per process (drawn in the HTML report), or none."""
    if sides is None:
        return True
    if not isinstance(sides, dict) or set(sides) != {"head", "base"}:
        return False
    head, base = sides["head"], sides["base"]
    if not isinstance(head, list) or not isinstance(base, list) or len(head) != len(base):
        return False
    return all(number(v, positive=True) for v in (*head, *base))


def load_report(path: Path) -> dict[str, Any]:
    """A JSON report written by ``pytest --hpml-report``; a :class:`BaselineError` otherwise."""
    data: dict[str, Any] = reader.read_json(existing(path), "report")
    problem = report_problem(data)
    if problem:
        raise BaselineError(f"{path} is not a pytest-hpml report ({problem})")
    return data


def holds(path: Path) -> Callable[[dict[str, Any]], bool] | None:
    """Which records a baseline file holds: portable ones, one machine's, or instruction counts
    (each kind has a file of its own); None for a JSON report, which holds them all."""
    if files.is_report(path):
        return None
    data = baselines.load(path)
    if "counted_on" in data:
        return lambda record: bool(record.get("counted_on"))
    portable = "fingerprint" not in data
    return lambda record: bool(record.get("portable")) == portable and not record.get("counted_on")
