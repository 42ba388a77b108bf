"""Metric records, typed, and the one registry of metric kinds.

A benchmark gives metrics (``time``, ``throughput``, ``speedup[a/b]``, ``flops``...), each a
record of one *kind*. The record is made here as a dataclass and travels as its plain-dict
form (``as_dict``): in xdist reports, rerun files, JSON reports and baseline files. Whatever
needs to know how a kind behaves (does it pool over processes, which way is better, where is
it stored, how is it judged, is it plotted) asks :data:`KINDS`, never compares kind names.

Adding a kind is one :class:`Kind` in :func:`register` plus a judge of that name in the
verdict layer (:mod:`pytest_hpml.verdict.judge`), or a ``pytest_hpml_judge_metric`` hook.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from ..config.values import shown

Record = dict[str, Any]  # a metric record in its plain-dict form


@dataclass(frozen=True)
class Kind:
    """How metrics of one kind behave."""

    name: str
    description: str
    sampled: bool  # one sample per round; runs of several processes are pooled
    higher_is_better: bool | None  # None: each record says (``higher_is_worse``)
    portable: bool  # stored in the portable (machine-independent) baseline file by default
    per_second: bool = False  # normalized by multiplying by the reference time (rates)
    plotted: bool = False  # drawn in the HTML report's sample panels
    judge: str = "samples"  # the name of the verdict layer's judge for this kind


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add a kind to the registry (a plugin may add its own); returns it."""
    KINDS[kind.name] = kind
    return kind


TIME = register(
    Kind("time", "seconds per call; samples with the reference time of their rounds",
         sampled=True, higher_is_better=False, portable=False, plotted=True)
)  # fmt: skip
RATE = register(
    Kind("rate", "per second (throughput, FLOP/s); samples", sampled=True,
         higher_is_better=True, portable=False, per_second=True, plotted=True)
)  # fmt: skip
RATIO = register(
    Kind("ratio", "a speed-up measured in one run as paired-round ratios", sampled=True,
         higher_is_better=True, portable=False, judge="ratio")
)  # fmt: skip
COUNT = register(
    Kind("count", "a deterministic value (FLOPs, parameters, graph breaks), exact or within "
         "a tolerance", sampled=False, higher_is_better=None, portable=True, judge="count")
)  # fmt: skip
INSTRUCTIONS = register(
    Kind("instructions", "CPU instructions per call counted under callgrind, within a "
         "tolerance; stored by what the count depends on (Note [Instruction counts])",
         sampled=False, higher_is_better=False, portable=False, judge="count")
)  # fmt: skip


def kind_of(record: Mapping[str, Any]) -> Kind | None:
    """The kind of a record, None for a kind this version does not know."""
    return KINDS.get(str(record.get("kind")))


def is_sampled(record: Mapping[str, Any]) -> bool:
    kind = kind_of(record)
    return kind is not None and kind.sampled


def per_second(record: Mapping[str, Any]) -> bool:
    kind = kind_of(record)
    return kind is not None and kind.per_second


def higher_is_worse(record: Mapping[str, Any]) -> bool:
    kind = kind_of(record)
    if kind is None or kind.higher_is_better is None:
        return bool(record.get("higher_is_worse", True))
    return not kind.higher_is_better


@dataclass
class Metric:
    """Fields every record has. ``cited``: a published figure shown beside it, never judged."""

    KIND: ClassVar[Kind]
    unit: str
    portable: bool | None = None  # None: the kind's default
    cited: dict[str, Any] | None = None

    def as_dict(self) -> Record:
        data = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        data["portable"] = self.KIND.portable if self.portable is None else self.portable
        return {"kind": self.KIND.name, **data}


@dataclass
class Sampled(Metric):
    samples: list[float] = field(default_factory=list)
    # the same samples on the measuring thread's CPU clock, where measured (Note [Thread clock])
    cpu_samples: list[float] | None = None
    reference: list[float] = field(default_factory=list)  # reference time before each round
    load: float | None = None  # 1-minute load average per usable core, at the rounds' end
    # torch's thread count, grad mode, default dtype... while measured (Note [Torch state])
    state: dict[str, Any] | None = None
    # in a process of the pairs: where each slice after the first began (Note [Slices])
    slices: list[int] | None = None


@dataclass
class Time(Sampled):
    KIND: ClassVar[Kind] = TIME
    first_call: float | None = None  # seconds, lazy work included
    warmup_calls: int | None = None
    iterations: int | None = None  # calls per round
    budget: float | None = None  # seconds of rounds this process was given


@dataclass
class Rate(Sampled):
    KIND: ClassVar[Kind] = RATE


@dataclass
class Utilization(Rate):
    """``mfu``: each sample is its rounds' FLOP/s over the device's dense peak (Note [MFU]).

    A rate, judged as throughput is: its samples are FLOP/s divided by a constant, so they carry
    the rounds' noise, which a count's exact verdict would call a change, and they follow the
    machine's speed as FLOP/s do, so the reference workload steadies them the same way (higher
    is better, multiplied by the reference time). ``peak`` (FLOP/s) and ``precision`` say what
    they were taken against: another peak is another metric, as another machine's times are.
    """

    peak: float | None = None
    precision: str | None = None  # fp32, tf32, bf16, fp16, fp8: the step's dominant


@dataclass
class Ratio(Sampled):
    KIND: ClassVar[Kind] = RATIO
    tolerance: float | None = None  # the threshold for this speed-up, instead of the run's
    tolerance_from: str | None = None  # where the tolerance was set, for the verdict's reason
    # a speed-up between variants on different numbers of cores: the cores it needs free, and
    # how many the host's other work left free while measured (Note [Free cores])
    cores: int | None = None
    free_cores: float | None = None


@dataclass
class Count(Metric):
    KIND: ClassVar[Kind] = COUNT
    value: float = 0
    tolerance: float = 0.0  # relative
    tolerance_from: str | None = None  # where a tolerance was set, for the verdict's reason
    higher_is_worse: bool = True
    # what explains the value: counts per operator, source lines (Note [Work counters])
    detail: dict[str, Any] | None = None


@dataclass
class Instructions(Count):
    """Instructions per call of ``calls`` calls counted under callgrind; ``detail["by"]``
    holds the functions that ran the most of them."""

    KIND: ClassVar[Kind] = INSTRUCTIONS
    OTHERS: ClassVar[str] = "(other functions)"  # in ``detail["by"]``: those outside the top
    calls: int = 1
    counted_on: str = ""  # what the count depends on: its baseline file is named after it
    waits: int = 0  # times a warm-up call waited for others (Note [Instruction counts])


# The work counters of every benchmark and their units (Note [Work counters]); besides them,
# ``flops[<dtype>]`` counts the FLOPs of each dtype.
WORK_UNITS = {
    "ops": "",
    "views": "",
    "syncs": "",
    "host_tensors": "",
    "copies": "",
    "copy_bytes": "B",
    "allocations": "",
    "allocated_bytes": "B",
    "saved_tensors": "",
    "saved_bytes": "B",
}


def is_work_counter(name: str) -> bool:
    """Whether a metric is one of the work counters every benchmark records."""
    return name.partition("[")[0] in WORK_UNITS or name.startswith("flops[")  # syncs[bf16]


# --- what a test gives the benchmark's calls (record, expect, expect_change, ...) -------------
# Each is checked at the call, in a frame marked ``__tracebackhide__ = True``, so that the test's
# own line shows with the message (Note [Tracebacks]); a message names the call, the argument
# as given, and what it accepts.

VALUE = "a finite int or float (not a bool)"
TOLERANCE = "a relative tolerance: a finite number >= 0, such as 0.05"
BOUND = "the most one call may ask for: a finite number >= 0"
NAME = "a metric's name: a non-empty str without control characters or blanks around it"
# A control character acts on a terminal (shown escaped, but then the name is no longer what
# was written); a lone surrogate cannot be written as UTF-8. Other characters a terminal might
# act on (bidirectional overrides) are shown escaped where text leaves pytest-hpml.
_UNWRITTEN = ("Cc", "Cs")


def given(call: str, argument: str, value: Any) -> str:
    """An argument as the test gave it, for a message: ``record(value='abc')``, or
    ``expect_change(**{'': '+1'})`` for a keyword no call could spell."""
    shown_value = shown(_repr(value))
    if argument.isidentifier():
        return f"{call}({argument}={shown_value})"
    return f"{call}(**{{{shown(repr(argument))}: {shown_value}}})"


def _repr(value: Any) -> str:
    """``repr(value)``, or what it is where that fails (an int of more digits than
    ``sys.set_int_max_str_digits`` allows, an object whose ``__repr__`` raises)."""
    try:
        return repr(value)
    except Exception:
        if isinstance(value, int):
            return f"<an int of {value.bit_length()} bits>"
        return f"<{type(value).__name__} object>"


def check_name(call: str, argument: str, value: Any, name: Any) -> str:
    """``name`` as a metric's name (a table's row, a baseline's key), given as ``argument``
    of ``call`` with ``value``; a TypeError or ValueError saying what a name may be."""
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    if not isinstance(name, str):
        raise TypeError(f"{given(call, argument, value)}: give {NAME}")
    _refuse_controls(call, argument, value, name, NAME)
    if not name or name != name.strip():
        raise ValueError(f"{given(call, argument, value)}: give {NAME}")
    return name


def _refuse_controls(call: str, argument: str, value: Any, text: str, accepts: str) -> None:
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    bad = next((c for c in text if unicodedata.category(c) in _UNWRITTEN), None)
    if bad is not None:
        kind = "lone surrogate" if unicodedata.category(bad) == "Cs" else "control character"
        raise ValueError(
            f"{given(call, argument, value)}: it contains the {kind} {bad!r}; give {accepts}"
        )


def _as_float(value: Any) -> float | None:
    """A real number (not a bool) as a float; None for none, or one beyond a float's range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:  # an int of 309 digits or more
        return math.inf


def check_number(
    call: str, argument: str, value: Any, accepts: str, at_least: float | None = None
) -> float:
    """``value`` as a finite number not below ``at_least``: an int stays an int (a count stays
    exact in the baseline), anything else real is a float (numpy's too)."""
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    found = _as_float(value)
    if found is None:
        raise TypeError(f"{given(call, argument, value)}: give {accepts}")
    if not math.isfinite(found) or (at_least is not None and found < at_least):
        raise ValueError(f"{given(call, argument, value)}: give {accepts}")
    return int(value) if isinstance(value, numbers.Integral) else found


def check_text(call: str, argument: str, value: Any, accepts: str, empty: bool = False) -> str:
    """``value`` as a str without control characters (shown in tables), empty only if
    ``empty``."""
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    if not isinstance(value, str):
        raise TypeError(f"{given(call, argument, value)}: give {accepts}")
    _refuse_controls(call, argument, value, value, accepts)
    if not (empty or value.strip()):
        raise ValueError(f"{given(call, argument, value)}: give {accepts}")
    return value


def check_flag(call: str, argument: str, value: Any) -> bool:
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    if not isinstance(value, bool):
        raise TypeError(f"{given(call, argument, value)}: give True or False")
    return value


def metric_of(keyword: str) -> str:
    """A keyword argument's name as the metric's: ``flops_float32`` is ``flops[float32]``."""
    return f"flops[{keyword[len('flops_') :]}]" if keyword.startswith("flops_") else keyword


def check_keyword(call: str, keyword: str, value: Any) -> str:
    """The metric a keyword of ``expect`` or ``expect_change`` names (given ``value``)."""
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    check_name(call, keyword, value, keyword)
    if keyword == "flops_":
        raise ValueError(
            f"{given(call, keyword, value)}: flops_ names no dtype; give flops_<dtype>, such as "
            "flops_float32 for flops[float32]"
        )
    return metric_of(keyword)


# "+15%", "+2", "+0.5", "+1e-07" (the form Amount's str gives a small or large number)
_AMOUNT = re.compile(r"\+?(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(%?)")


class Amount(NamedTuple):
    """How much a metric may grow: relative (``+15%``) or by a count per call (``+2``)."""

    value: float
    relative: bool

    def __str__(self) -> str:
        """``+15%``, ``+2``: read back by :func:`parse_amount` as the same amount (the change
        travels as this text in reports and rerun files)."""
        exact = self.value.is_integer() and self.value < 1e16
        number = str(int(self.value)) if exact else repr(self.value)
        return f"+{number}%" if self.relative else f"+{number}"


def parse_amount(amount: Any) -> Amount | None:
    """``"+15%"``, ``"+2"`` or an int >= 0, finite; None for anything else."""
    if isinstance(amount, int) and not isinstance(amount, bool):
        value = _as_float(amount)
        return Amount(value, False) if value is not None and 0 <= value < math.inf else None
    found = _AMOUNT.fullmatch(amount.strip()) if isinstance(amount, str) else None
    if found is None or not math.isfinite(float(found.group(1))):
        return None
    return Amount(float(found.group(1)), bool(found.group(2)))


def check_amount(call: str, keyword: str, amount: Any) -> Amount:
    """:func:`parse_amount`, refusing what it does not read (a TypeError, as ever)."""
    __tracebackhide__ = True  # refuses the test's arguments (Note [Tracebacks])
    found = parse_amount(amount)
    if found is None:
        raise TypeError(
            f"{given(call, keyword, amount)}: give how much it may grow, as '+15%' (relative) "
            "or '+2' (per call), a finite number"
        )
    return found
