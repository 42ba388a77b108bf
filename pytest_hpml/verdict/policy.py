"""Which verdicts fail a run: the counter policy, and the changes a pull request accepts.

A judge says how a metric moved; this module says what that means for the run. A work counter
of a *cost* class (host syncs, copies between devices, tensors built from Python data, FLOPs,
graph breaks) fails on any increase: each costs time on a GPU even where a CPU runner cannot
see it. One of a *size* class (operators, allocations, tensors saved for backward, instructions)
fails only beyond a share of 5%; within it, it is ``changed``, shown and not failing, since a few
more allocations may cost nothing (Note [Counter policy]). Views and metadata operators launch
no kernel: their count is ``changed`` whatever it grows by. ``--hpml-counters=strict`` fails
every increase. A change the test accepts (``benchmark.expect_change``) is ``accepted``,
with its reason, up to the amount it names (Note [Accepted changes]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..bench import metrics
from ..model import BEFORE_CONTROL as BEFORE_CONTROL
from ..model import Comparison, Earlier, Result
from . import stats
from .judge import joined

# Work counters that may grow by up to SIZE_GROWTH without failing the run (Note [Counter
# policy]); every other count, a project's own included, fails on any increase.
SIZE = ("ops", "allocations", "allocated_bytes", "saved_tensors", "saved_bytes", "instructions")
# How much a size counter may grow without failing: its own share, not the time threshold (a
# team that widens that for a noisy runner must not loosen the counts that noise cannot move).
SIZE_GROWTH = 0.05


# Work counters that only show, and fail under --hpml-counters=strict alone: views and
# metadata operators, which launch no kernel (Note [Counter policy]).
SHOWN = ("views",)


def counter_class(name: str) -> str:
    """``size``, ``shown`` or ``cost``: how a count ``name`` (``ops``, ``syncs[bf16]``,
    ``instructions``) is judged."""
    head = name.partition("[")[0]
    return "size" if head in SIZE else "shown" if head in SHOWN else "cost"


def settle(
    comparison: stats.Comparison,
    name: str,
    accepted: Mapping[str, Mapping[str, str]] | None,
    strict: bool,
) -> stats.Comparison:
    """The verdict that counts for the run: a size counter's growth within SIZE_GROWTH is
    ``changed`` unless ``strict``; a growth the test accepted is ``accepted``."""
    comparison = _by_class(comparison, name, strict)
    said = _accepted_for(name, accepted or {})
    return comparison if said is None else _accept(comparison, said)


def _by_class(comparison: stats.Comparison, name: str, strict: bool) -> stats.Comparison:
    kind = counter_class(name)
    # a size counter's growth from 0 has no share: it fails as a cost counter's would
    regressed = comparison.verdict == stats.REGRESSED and (
        comparison.change is not None or kind == "shown"
    )
    if not regressed or kind == "cost":
        return comparison
    if strict:
        reason = "any change fails with --hpml-counters=strict"
        return dataclasses.replace(comparison, reason=joined(comparison.reason, reason))
    if kind == "shown":
        reason = (
            "views and metadata operators launch no kernel: shown, failing only with "
            "--hpml-counters=strict"
        )
        return dataclasses.replace(
            comparison, verdict=stats.CHANGED, reason=joined(comparison.reason, reason)
        )
    if comparison.change is None or comparison.change > SIZE_GROWTH:  # never None: see regressed
        reason = (
            f"more than the {SIZE_GROWTH:.0%} a count of operators, memory or instructions "
            "may grow without failing (Note [Counter policy])"
        )
        return dataclasses.replace(comparison, reason=joined(comparison.reason, reason))
    reason = (
        f"within the {SIZE_GROWTH:.0%} a count of operators, memory or instructions may grow "
        "without failing (Note [Counter policy]; --hpml-counters=strict fails it)"
    )
    return dataclasses.replace(
        comparison, verdict=stats.CHANGED, reason=joined(comparison.reason, reason)
    )


def _accepted_for(name: str, accepted: Mapping[str, Mapping[str, str]]) -> Mapping[str, str] | None:
    """What the test accepted for ``name``, or for all its variants (``syncs`` for
    ``syncs[bf16]``)."""
    return accepted.get(name) or accepted.get(name.partition("[")[0])


def _allows(amount: metrics.Amount, comparison: stats.Comparison) -> bool:
    """Whether the change judged is within ``amount``."""
    if amount.relative:
        return comparison.change is not None and comparison.change <= amount.value / 100
    if comparison.current is None or comparison.baseline is None:
        return False
    return comparison.current - comparison.baseline <= amount.value


def _accept(comparison: stats.Comparison, said: Mapping[str, str]) -> stats.Comparison:
    amount = metrics.parse_amount(said.get("change"))
    if amount is None:  # checked at the call: only an edited rerun file or report gets here
        reason = f"expect_change's amount {said.get('change')!r} cannot be read; not applied"
        return dataclasses.replace(comparison, reason=joined(comparison.reason, reason))
    why = f"expect_change({amount}): {said.get('reason')}"
    if comparison.verdict in (stats.REGRESSED, stats.CHANGED):
        if _allows(amount, comparison):
            reason = joined(comparison.reason, f"accepted by {why}")
            return dataclasses.replace(comparison, verdict=stats.ACCEPTED, reason=reason)
        reason = joined(comparison.reason, f"beyond what {why} accepts")
        return dataclasses.replace(comparison, reason=reason)
    if comparison.verdict in (stats.PASS, stats.IMPROVED):
        reason = f"{why} did not happen here (drop it once the base has the change)"
        return dataclasses.replace(comparison, reason=joined(comparison.reason, reason))
    return comparison


def unrecorded(
    accepted: Mapping[str, Any], tolerance: Mapping[str, Any], recorded: Mapping[str, Any]
) -> list[str]:
    """What a test names that its benchmark does not record, each said as a run error: the
    metrics its ``expect_change`` accepts (a name covers its variants: ``syncs`` for
    ``syncs[fast]``), and the counts its ``hpml_bench(tolerance=...)`` loosens (a tolerance
    applies to no other metric). Instructions are counted later, in their own process, and
    always match. Known only once the benchmark ran: the marker's own check cannot tell."""
    counts = counter_names(recorded)
    variants = {name.partition("[")[0] for name in recorded}
    checks = (
        ("expect_change", accepted, {*recorded, *variants}, "record; it records", recorded),
        ("hpml_bench(tolerance=...)", tolerance, counts, "count; it counts", counts),
    )
    said = []
    for what, given, known, verb, listed in checks:
        missing = sorted(name for name in given if name not in {*known, "instructions"})
        if missing:  # quoted: a name may be empty, or hold a comma
            said.append(
                f"{what} names {_quoted(missing)}, which this benchmark does not {verb} "
                f"{_quoted(sorted(listed)) or 'nothing'}"
            )
    return said


def _quoted(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names)


def counter_names(recorded: Mapping[str, Any]) -> set[str]:
    """The counts among ``recorded`` by the names ``hpml_bench(tolerance=...)`` gives them: the
    work counters without a variant's suffix (``syncs`` for ``syncs[fast]``, ``flops[float32]``
    for ``flops[float32][fast]``), and instructions."""
    names = {"instructions"}
    for name in recorded:
        if metrics.is_work_counter(name):
            head, _, rest = name.partition("[")
            names.add(f"{head}[{rest.partition(']')[0]}]" if head == "flops" else head)
    return names


# A faster call that measured the host's work directly: a grown count of the size class is
# inside that, while a cost class is not (a CPU runner cannot time a GPU's sync or copy).
MEASURED = ("time", "instructions")


def paid_for(
    verdicts: Mapping[str, Comparison], strict: bool, against: bool = True
) -> dict[str, Comparison]:
    """``verdicts`` (one test's, metric -> verdict) where, its time or instruction count
    having improved, its size counters that grew beyond SIZE_GROWTH are ``changed``, not
    failing: operators and allocations cost host time, and that was measured to fall (Note
    [Counter policy]). A time counts only where it was measured in pairs (``against``): one
    judged against a stored baseline may have been recorded on a busy host."""
    measured = MEASURED if against else tuple(m for m in MEASURED if m != "time")
    faster = [m for m in measured if _is(verdicts.get(m), stats.IMPROVED)]
    if strict or not faster:
        return dict(verdicts)
    grown = [
        name
        for name, verdict in verdicts.items()
        if verdict.verdict == stats.REGRESSED
        and counter_class(name) == "size"
        and name.partition("[")[0] not in MEASURED  # an instruction count is itself measured
    ]
    said = f"but the {' and '.join(faster)} improved: the host's cost of it was measured"
    return _changed(verdicts, grown, said)


def _is(verdict: Comparison | None, wanted: str) -> bool:
    return verdict is not None and verdict.verdict == wanted


def _changed(
    verdicts: Mapping[str, Comparison], grown: list[str], said: str
) -> dict[str, Comparison]:
    """``verdicts`` with each of ``grown`` (metric names) ``changed``, saying why."""
    found = dict(verdicts)
    for name in grown:
        verdict = found[name]
        reason = joined(verdict.reason, said)
        found[name] = dataclasses.replace(verdict, verdict=stats.CHANGED, reason=reason)
    return found


TRANSFERS = ("host_tensors", "copies")  # copies the host starts and need not wait for


def traded(verdicts: Mapping[str, Comparison], strict: bool) -> dict[str, Comparison]:
    """``verdicts`` where grown host tensors and copies between devices that came with at
    least as many fewer syncs are ``changed``, not failing: a sync makes the host wait for the
    device, a transfer does not, so the trade costs less than it saves (Note [Counter
    policy])."""
    syncs = verdicts.get("syncs")
    if strict or syncs is None or syncs.verdict != stats.IMPROVED:
        return dict(verdicts)
    fewer = (syncs.baseline or 0) - (syncs.current or 0)
    grown = [name for name in TRANSFERS if _is(verdicts.get(name), stats.REGRESSED)]
    more = sum((verdicts[n].current or 0) - (verdicts[n].baseline or 0) for n in grown)
    if more > fewer:
        return dict(verdicts)
    said = f"traded for {fewer:,g} fewer syncs, each a wait where a transfer is not"
    return _changed(verdicts, grown, said)


def control(results: Sequence[Result], strict: bool, against: bool = False) -> tuple[int, int]:
    """The steps that judge a session's verdicts together, once every metric is judged: the
    Benjamini-Hochberg control over all tested metrics (Note [Many metrics]), then per test
    the size counters a measured speed-up paid for and the transfers traded for syncs (Note
    [Counter policy]). Each verdict these change (in ``results``) keeps its earlier verdict
    and reason (``Comparison.before``). Returns (demoted, tested): how many changes the
    control demoted, and how many metrics rest on a test. Head against base (``against``)
    controls at the pairs' own level (Note [Head against base])."""
    names = [(result, name) for result in results for name in result.verdicts]
    everything = [result.verdicts[name] for result, name in names]
    alpha = stats.PAIR_ALPHA if against else stats.ALPHA
    controlled = stats.session_wide(everything, alpha)
    demoted = sum(a.verdict != b.verdict for a, b in zip(everything, controlled))
    for (result, name), verdict in zip(names, controlled):
        result.verdicts[name] = verdict
    for result in results:
        result.verdicts = traded(paid_for(result.verdicts, strict, against), strict)
    for (result, name), was in zip(names, everything):
        now = result.verdicts[name]
        if (now.verdict, now.reason) != (was.verdict, was.reason):
            earlier = Earlier(was.verdict, was.reason)
            result.verdicts[name] = dataclasses.replace(now, before=earlier)
    return demoted, sum(v.confidence is not None for v in everything)


def uncontrolled(verdict: Comparison) -> Comparison:
    """``verdict`` as it was before :func:`control`: what one test's run found, before the
    other metrics of its session were counted."""
    if verdict.before is None:
        return verdict
    earlier = verdict.before
    return dataclasses.replace(verdict, verdict=earlier.verdict, reason=earlier.reason, before=None)
