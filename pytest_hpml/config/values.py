"""The values of pytest-hpml's options: each option's parser (an argparse ``type=`` callable,
so a bad command-line value is a usage error at parse time, and the check of the environment's
and the ini file's values too), their bounds, and how a value is quoted in a message."""

from __future__ import annotations

import argparse
import math
import os
import re
from typing import Any, Callable, Literal

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICE_TYPES = ("cpu", "cuda", "mps")
DIST_BACKENDS = ("auto", "gloo", "nccl", "mpi")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MAX_AUTO_WORKERS = 8
MAX_WORKERS = 256  # more DataLoader workers than this is a typo, not a plan
BASELINE_MODES = ("compare", "update", "append", "off")
COUNTER_POLICIES = ("lenient", "strict")  # Note [Counter policy]
# Values renamed in 0.1, read until 0.2 with a deprecation warning: old word -> new one.
FORMER_COUNTER_POLICIES = {"classes": "lenient"}

MAX_THREADS = 1024  # see parse_threads
MAX_RANKS = 4096  # see parse_max_ranks
MAX_LENGTH = 4096  # a longer value is no setting but a pasted file (PATH_MAX is 4096)
# A message repeats a value up to this long (an interpreter's path in a deep checkout), and
# only the start of a longer one: 700 digits, a pasted file (see shown).
SHOWN_LENGTH = 240
# torch's device index is 8 bits (c10::DeviceIndex): torch.device("cuda:256") is cuda:0 and
# "cuda:128" is cuda:-128, so a higher index would name another device, not none.
MAX_DEVICE_INDEX = 127
# Variables of pytest-hpml's own processes, set for them and never by a user (Note [Internal
# variables]): no option, and no typo of one (see _unknown_variables).
INTERNAL_PREFIXES = ("HPML_INTERNAL_", "HPML_RANK_")

_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")  # ASCII digits: torch refuses others
_BACKEND = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # ASCII, as every other option's words


def number(value: Any, positive: bool = False) -> bool:
    """A finite int or float (not a bool), and above 0 if ``positive``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return ok and (value > 0 if positive else True)


def _items(value: str) -> list[str]:
    """Split a comma list, dropping duplicates but keeping order."""
    items = [v.strip() for v in str(value).split(",")]
    if not any(items) or not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {quoted(value)}")
    return list(dict.fromkeys(items))


def _bad(kind: str, value: str, choices: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"unknown {kind} {quoted(value)}; choose from {choices}")


def digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits only. int() and float() read the digits of any script
    (Arabic-Indic, fullwidth) while torch's device index, the launchers' rank variables and the
    other tools do not: one rule for every number (Note [Blank values])."""
    return text.isascii() and text.isdecimal()


def whole(value: str, most: int) -> int | None:
    """``value`` as a whole number from 0 to ``most``, or None: not one, or above ``most``
    (told apart by the caller where the message differs). Leading zeros aside, a number of more
    digits than ``most`` is above it, and never reaches int()'s limit on digits."""
    text = str(value).strip()
    if not digits(text):
        return None
    figures = text.lstrip("0") or "0"
    return int(figures) if len(figures) <= len(str(most)) and int(figures) <= most else None


def _real(text: str) -> float:
    """``text`` as a float, in ASCII only (see :func:`digits`); ValueError otherwise."""
    if not text.isascii():
        raise ValueError(text)
    return float(text)


def parse_devices(value: str) -> tuple[str, ...]:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or a comma list of them."""
    items = _items(value)
    for item in items:
        if not _DEVICE.fullmatch(item):
            raise _bad("device", item, "auto, cpu, cuda, cuda:N, mps (comma-separated for several)")
        index = item.partition(":")[2]
        if index and whole(index, MAX_DEVICE_INDEX) is None:
            raise argparse.ArgumentTypeError(
                f"device {quoted(item)}: torch numbers devices from 0 to {MAX_DEVICE_INDEX} "
                "(a higher index wraps around to another device); choose one of this machine's"
            )
    return tuple(items)


def parse_precisions(value: str) -> tuple[str, ...]:
    """A comma list from fp32, tf32, fp16, bf16."""
    items = list(dict.fromkeys(v.lower() for v in _items(value)))
    for item in items:
        if item not in PRECISIONS:
            raise _bad("precision", item, ", ".join(PRECISIONS) + " (comma-separated for several)")
    return tuple(items)


def parse_backends(value: str) -> tuple[str, ...]:
    """Comma list of ``torch.compile`` backends, each optionally ``inductor:MODE``.

    Only the syntax is checked here; whether torch knows the name is checked lazily, once a
    test asks for the ``backend`` fixture (importing torch._dynamo costs seconds).
    """
    items = _items(value)
    for item in items:
        name, colon, mode = item.partition(":")
        if not _BACKEND.fullmatch(name):
            raise argparse.ArgumentTypeError(f"invalid backend name {quoted(name)}")
        if colon and name != "inductor":
            raise argparse.ArgumentTypeError(
                f"invalid backend {quoted(item)}: only inductor takes a mode, one of "
                + ", ".join(COMPILE_MODES)
            )
        if colon and mode not in COMPILE_MODES:  # "inductor:" too
            raise argparse.ArgumentTypeError(
                f"invalid backend {quoted(item)}: {quoted(mode)} is no mode of inductor; "
                "choose from " + ", ".join(COMPILE_MODES)
            )
    return tuple(items)


def parse_dist_backend(value: str) -> str:
    """One of auto, gloo, nccl, mpi."""
    value = value.strip().lower()
    if value not in DIST_BACKENDS:
        raise _bad("distributed backend", value, ", ".join(DIST_BACKENDS))
    return value


def usable_cpus() -> int:
    """CPUs this process may run on (affinity and cgroup-pinned sets, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def auto_workers() -> int:
    """A sensible DataLoader worker count: one per usable CPU, capped where returns diminish."""
    return max(1, min(usable_cpus(), MAX_AUTO_WORKERS))


def parse_workers(value: str) -> tuple[int, ...]:
    """Comma list of worker counts (integers >= 0) or ``auto``."""
    counts: list[int] = []
    for item in _items(value):
        if item == "auto":
            counts.append(auto_workers())
        elif digits(item):
            count = whole(item, MAX_WORKERS)
            if count is None:
                raise argparse.ArgumentTypeError(
                    f"worker count {shown(item)} is more than {MAX_WORKERS}; choose fewer"
                )
            counts.append(count)
        else:
            raise _bad("worker count", item, "integers >= 0 or auto (comma-separated for several)")
    return tuple(dict.fromkeys(counts))


def parse_seed(value: str) -> int:
    """An integer in [0, 2**32) so that numpy accepts it too, compared with that bound before
    int() reads it (:func:`whole`)."""
    text = str(value).strip().removeprefix("+")
    if not digits(text.removeprefix("-")):
        raise argparse.ArgumentTypeError(f"seed must be an integer, got {quoted(value)}")
    seed = whole(text, 2**32 - 1)
    if seed is None:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2**32), got {shown(text)}")
    return seed


def parse_baseline_mode(value: str) -> str:
    """compare, update or off."""
    value = value.strip().lower()
    if value not in BASELINE_MODES:
        raise _bad("baseline mode", value, ", ".join(BASELINE_MODES))
    return value


class Former(str):
    """A value given by its former word (``classes``): the new word, with the old one kept so
    that resolution can warn that it is deprecated."""

    old: str

    def __new__(cls, new: str, old: str) -> Former:
        value = super().__new__(cls, new)
        value.old = old
        return value


def parse_counter_policy(value: str) -> str:
    """lenient or strict (``classes``, the former word for lenient, as a :class:`Former`)."""
    value = value.strip().lower()
    if value in FORMER_COUNTER_POLICIES:
        return Former(FORMER_COUNTER_POLICIES[value], value)
    if value not in COUNTER_POLICIES:
        raise _bad("counter policy", value, ", ".join(COUNTER_POLICIES))
    return value


def parse_fraction(value: str) -> float:
    """A relative change: a fraction below 1 (0.06) or a percentage (6%, up to 1000%).

    A bare number of 1 or more is refused rather than read as a fraction: ``5`` meant as 5%
    would be 500%, and let a 3x slowdown pass."""
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        number = _real(text[:-1]) / 100 if percent else _real(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a fraction such as 0.1 or 10%, got {quoted(value)}"
        ) from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive fraction or percentage, got {quoted(value)}"
        )
    if not percent and number >= 1:
        raise argparse.ArgumentTypeError(
            f"expected a fraction below 1 (0.05 is 5%), got {quoted(value)}; "
            f"write {number:g}% for {number:g} percent"
        )
    if number > 10:
        raise argparse.ArgumentTypeError(f"expected at most 1000%, got {quoted(value)}")
    return number


def parse_seconds(value: str) -> float:
    """A positive number of seconds."""
    try:
        seconds = _real(str(value).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {quoted(value)}") from None
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 3600], got {quoted(value)}")
    return seconds


def _auto_or_positive(what: str, most: int) -> Callable[[str], int | None]:
    """A parser of ``auto`` (None: decided where it is needed) or a number of ``what`` from 1
    to ``most``."""

    def parse(value: str) -> int | None:
        text = str(value).strip().lower()
        if text == "auto":
            return None
        count = whole(text, most)
        if not count:
            raise argparse.ArgumentTypeError(
                f"expected auto or a positive number of {what} (at most {most}), "
                f"got {quoted(value)}"
            )
        return count

    return parse


# Each rank is a process importing torch: more than this on one machine is a typo, and would
# run into the kernel's process limit (pid_max is 32768 by default) before any test ran.
parse_max_ranks = _auto_or_positive("ranks", MAX_RANKS)
# libgomp aborts at 20000 threads ("Thread creation failed") and 100000 segfaults (exit 139);
# 1024 and 4096 threads with a matmul and a convolution ran on a 2-core VM, also under
# OMP_NUM_THREADS=1024. 1024 is above any machine's cores (a test measures what it asks for).
parse_threads = _auto_or_positive("threads", MAX_THREADS)


# A peak below this is a unit slip (989 meant as TFLOP/s), not a device: a CPU core does more.
MIN_PEAK_FLOPS = 1e6


def parse_peak_flops(value: str) -> float | None:
    """A device's dense peak in FLOP/s, a positive number such as ``989e12``; the default,
    empty, is none (the peak then comes from the hook, or pytest-hpml's table of GPUs)."""
    text = str(value).strip()
    if not text:
        return None
    try:
        flops = _real(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a peak in FLOP/s such as 989e12, got {quoted(value)}"
        ) from None
    if not math.isfinite(flops) or flops <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive peak in FLOP/s, got {quoted(value)}")
    if flops < MIN_PEAK_FLOPS:
        raise argparse.ArgumentTypeError(
            f"expected a peak in FLOP/s, got {quoted(value)}, less than a megaFLOP/s: "
            f"write {flops:g}e12 for {flops:g} TFLOP/s"
        )
    return flops


def parse_processes(value: str) -> int:
    """A whole number of processes, 1 to 16."""
    count = whole(value, 16)
    if not count:
        raise argparse.ArgumentTypeError(f"expected 1 to 16 processes, got {quoted(value)}")
    return count


def parse_pairs(value: str) -> int:
    """A whole number of pairs of processes, 2 to 32: one pair gives no spread to judge by."""
    count = whole(value, 32)
    if count is None or count < 2:
        raise argparse.ArgumentTypeError(f"expected 2 to 32 pairs, got {quoted(value)}")
    return count


def parse_paths(value: str) -> tuple[str, ...]:
    """A comma list of directories (relative to the rootdir); the default, empty, is none."""
    text = str(value).strip()
    return tuple(_items(text)) if text else ()


def parse_text(value: str) -> str:
    """A name, a path or a revision, as given; the default, empty, is none."""
    return str(value).strip()


def parse_bool(value: str) -> bool:
    """1/true/yes/on or 0/false/no/off."""
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {quoted(value)}")


def parse_instructions(value: str) -> Literal[False, "all", "changed"]:
    """Which benchmarks --hpml-instructions counts: all (or a truth value), changed, or none
    (off, or a false one)."""
    text = str(value).strip().lower()
    if text in ("all", "changed"):
        return text  # type: ignore[return-value]
    try:
        return "all" if parse_bool(text) else False
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected all, changed or off, got {quoted(value)} (a path after a bare "
            "--hpml-instructions is read as its value: give the paths first, or "
            "--hpml-instructions=all)"
        ) from None


# What Option.read gives for an empty or blank value: unset (Note [Blank values]). No parser
# gives an empty string for anything else, and a string crosses to pytest-xdist's workers.
BLANK = ""


def shown(value: Any, quote: bool = False) -> str:
    """A value as a message shows it: cut short when long, escaped when not printable (a
    control character would act on the terminal), and in quotes if ``quote``. Every message
    that repeats a value given to pytest-hpml, whichever its source, shows it so."""
    text, cut = str(value), ""
    if len(text) > SHOWN_LENGTH:
        text, cut = text[:60], f"... ({len(text)} characters)"
    return (repr(text) if quote or not text.isprintable() else text) + cut


def quoted(value: Any) -> str:
    """``value`` quoted, as a parser's message repeats it: :func:`shown`, in quotes."""
    return shown(value, quote=True)


def given(source: str, value: Any) -> str:
    """A value with the source that gave it, as messages name it: ``HPML_SEED=x``,
    ``--hpml-seed=x``, ``ini hpml_seed = x``."""
    return f"{source} = {shown(value)}" if source.startswith("ini ") else f"{source}={shown(value)}"


def fraction_between_0_and_1(value: str) -> float:
    """A number in (0, 1), as the command's history options take it (an argparse type)."""
    try:
        found = float(value)
    except ValueError:
        found = math.nan
    if not 0 < found < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number between 0 and 1")
    return found
