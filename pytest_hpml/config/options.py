"""Options of pytest-hpml: one table serves the ``--hpml-*`` flags, ``hpml_*`` ini keys and
``HPML_*`` environment variables.

Each option's help text and parser are written once. The parsers are argparse ``type=``
callables, so a bad command-line value is a usage error at parse time; the same parsers check
values from the environment and the ini file in :func:`resolve`, through the one entry point
:meth:`Option.read`, so a value is accepted or refused alike from every source. Precedence:
command line > environment > ini > default; a blank value is unset (Note [Blank values]).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import math
import os
import re
import sys
import unicodedata
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Literal, NamedTuple

import pytest

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICE_TYPES = ("cpu", "cuda", "mps")
DIST_BACKENDS = ("auto", "gloo", "nccl", "mpi")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MAX_AUTO_WORKERS = 8
MAX_WORKERS = 256  # more DataLoader workers than this is a typo, not a plan
BASELINE_MODES = ("compare", "update", "append", "off")
COUNTER_POLICIES = ("classes", "strict")  # Note [Counter policy]

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


def parse_counter_policy(value: str) -> str:
    """classes or strict."""
    value = value.strip().lower()
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


class Option(NamedTuple):
    """One setting, reachable as ``--hpml-NAME``, ini ``hpml_NAME`` and env ``HPML_NAME``."""

    name: str
    dest: str
    help: str
    parse: Callable[[str], Any]
    default: str
    metavar: str = ""
    flag: bool = False
    # what the option given without a value means (``--hpml-instructions``): it then takes a
    # value only as ``--hpml-NAME=VALUE``, as pytest-cov's ``--cov`` does
    bare: str = ""
    # the line `pytest --help` shows (``help`` is the reference's, docs/reference/options.md)
    summary: str = ""
    needs: str = ""  # the option (its dest) without which this one would be ignored
    opts_in: bool = False  # giving it turns pytest-hpml's benchmarks on (Note [Opting in])
    stored_only: bool = False  # only stored baselines read it (Note [Unread options])

    @property
    def cli(self) -> str:
        return f"--hpml-{self.name}"

    @property
    def ini(self) -> str:
        return "hpml_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "HPML_" + self.name.replace("-", "_").upper()

    def read(self, value: Any) -> Any:
        """The value of this option given as ``value`` by any source (argparse's ``type=`` for
        the command line, :func:`resolve` for the environment and the ini file): ``BLANK`` if
        empty or blank, else parsed, or refused the same way whichever source gave it."""
        text = str(value).strip()
        if not text:
            return BLANK
        if len(text) > MAX_LENGTH:
            raise argparse.ArgumentTypeError(
                f"a value of {len(text)} characters; at most {MAX_LENGTH}"
            )
        control = next((c for c in text if unicodedata.category(c) == "Cc"), None)
        if control is not None:
            raise argparse.ArgumentTypeError(
                f"the value contains the control character {control!r}; remove it"
            )
        try:
            return self.parse(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc}{_look_alike(text)}") from None


def _look_alike(text: str) -> str:
    """Why a refused value may look right: a character outside ASCII (a fullwidth letter, a
    digit of another script), which no option's words or numbers hold; "" when there is none
    (Note [Blank values])."""
    odd = next((c for c in text if not c.isascii()), None)
    if odd is None:
        return ""
    return f"; {odd!r} is {unicodedata.name(odd, f'U+{ord(odd):04X}')}, not ASCII"


OPTIONS: tuple[Option, ...] = (
    Option(
        "device",
        "devices",
        "device(s) for device-aware tests: auto (cuda if available, else mps, else cpu), "
        "cpu, cuda, cuda:N, mps, or a comma list to run each test on several",
        parse_devices,
        "auto",
        "DEVICES",
        summary="test devices: auto, cpu, cuda[:N], mps",
    ),
    Option(
        "precision",
        "precisions",
        "precision(s) for the precision fixture, a comma list from fp32, tf32, fp16, bf16",
        parse_precisions,
        "fp32",
        "PRECISIONS",
        summary="precisions to test: fp32, tf32, fp16, bf16",
    ),
    Option(
        "backend",
        "backends",
        "torch.compile backend(s) for the backend fixture, a comma list; eager means no "
        "compilation, inductor:MODE picks a mode (e.g. inductor:max-autotune)",
        parse_backends,
        "eager",
        "BACKENDS",
        summary="compile backends: eager, inductor[:MODE]",
    ),
    Option(
        "dist-backend",
        "dist_backend",
        "torch.distributed backend: auto (nccl on CUDA, else gloo), gloo, nccl, mpi",
        parse_dist_backend,
        "auto",
        "BACKEND",
        summary="distributed backend: auto, gloo, nccl, mpi",
    ),
    Option(
        "dist-timeout",
        "dist_timeout",
        "seconds a @pytest.mark.distributed test may run before its ranks are stopped and it "
        "fails (the marker's timeout= overrides it); also the process group's timeout",
        parse_seconds,
        "300",
        "SECONDS",
        summary="seconds a distributed test may run",
    ),
    Option(
        "max-ranks",
        "max_ranks",
        "most ranks a @pytest.mark.distributed test may start here: auto (4 per usable CPU, or "
        "one per GPU where there are more GPUs) or a number; a test asking for more fails at its "
        "setup, before any rank starts",
        parse_max_ranks,
        "auto",
        "N",
        summary="most ranks a distributed test may start",
    ),
    Option(
        "workers",
        "workers",
        "DataLoader worker count(s) for the num_workers fixture, a comma list; auto picks one "
        "per CPU this process may use (at most 8)",
        parse_workers,
        "0",
        "COUNTS",
        summary="DataLoader worker counts to test, or auto",
    ),
    Option(
        "seed",
        "seed",
        "seed applied to random, numpy and torch before each test that uses an hpml fixture",
        parse_seed,
        "0",
        "INT",
        summary="seed of random, numpy and torch per test",
    ),
    Option(
        "benchmarks",
        "benchmarks",
        "measure and judge pytest-benchmark's benchmark tests the pytest-hpml way (device-"
        "synchronized rounds, fresh processes, baselines, verdicts); without it they run as if "
        "pytest-hpml were not installed. Giving any other benchmark option (--hpml-baseline, "
        "--hpml-bench-time, ...) turns it on",
        parse_bool,
        "false",
        flag=True,
        summary="measure and judge benchmarks the pytest-hpml way",
    ),
    Option(
        "baseline",
        "baseline",
        "benchmarks against stored baselines: compare (judge each metric), update (record this "
        "run as the baseline, merging into the files), append (add this run's processes to the "
        "stored ones, keeping up to 6 earlier process runs, all pooled), off (neither)",
        parse_baseline_mode,
        "compare",
        "MODE",
        summary="baselines: compare, update, append, off",
        opts_in=True,
    ),
    Option(
        "baseline-dir",
        "baseline_dir",
        "directory of baseline files, relative to the rootdir",
        parse_text,
        "baselines",
        "DIR",
        summary="directory of the baseline files",
        opts_in=True,
        stored_only=True,
    ),
    Option(
        "threshold",
        "threshold",
        "smallest relative change of a time metric that counts as a regression or improvement "
        "(a fraction below 1, 0.1 meaning 10 percent, or a percentage up to 1000: the number "
        "followed by a percent sign); the hpml_bench marker overrides it per test",
        parse_fraction,
        "0.06",
        "FRACTION",
        summary="smallest time change that counts",
        opts_in=True,
    ),
    Option(
        "bench-time",
        "bench_time",
        "seconds of measured rounds per benchmark at most (the reference workload included); "
        "a benchmark stops earlier once it has 300 samples",
        parse_seconds,
        "3",
        "SECONDS",
        summary="most seconds of measured rounds a benchmark",
        opts_in=True,
    ),
    Option(
        "against",
        "against",
        "judge every benchmark against the code of this git revision (origin/main, a tag, a "
        "sha; HEAD for an A/A check), measured side by side: fresh processes of the base tree "
        "and of the working tree alternate, and the verdict rests on the pairs; stored "
        "baselines are neither read nor written",
        parse_text,
        "",
        "REV",
        summary="judge benchmarks against this git revision",
        opts_in=True,
    ),
    Option(
        "pairs",
        "pairs",
        "the most pairs of fresh processes (one of the base, one of the working tree) a "
        "benchmark is measured in with --hpml-against: after 3 pairs, and after every second "
        "pair from there, the benchmarks whose verdicts are settled stop; a process measures "
        "for at least a second in all",
        parse_pairs,
        "7",
        "N",
        summary="most pairs of processes a benchmark takes",
        needs="against",
        opts_in=True,
    ),
    Option(
        "against-python",
        "against_python",
        "the interpreter that runs the base side with --hpml-against (another virtualenv): "
        "with --hpml-against=HEAD it compares two environments, e.g. two torch versions",
        parse_text,
        "",
        "PATH",
        summary="the base side's interpreter (another environment)",
        needs="against",
        opts_in=True,
    ),
    Option(
        "against-paths",
        "against_paths",
        "directories, a comma list relative to the rootdir, put first on sys.path of each side "
        "with --hpml-against, after the rootdir and its src/ (where the code under test lives)",
        parse_paths,
        "",
        "DIRS",
        summary="directories first on sys.path of each side",
        needs="against",
        opts_in=True,
    ),
    Option(
        "threads",
        "threads",
        "torch's intra-op CPU threads while a benchmark measures (torch.set_num_threads, set "
        "before the test or when the test imports torch, and in the environment of the "
        "processes that measure; restored after the test; a test that sets its own wins): "
        "auto is 1 with --hpml-against, as torch.utils.benchmark.Timer does, and torch's "
        "default otherwise (stored baselines were recorded with it)",
        parse_threads,
        "auto",
        "N",
        summary="torch's CPU threads in a benchmark",
        opts_in=True,
    ),
    Option(
        "processes",
        "processes",
        "fresh processes each benchmark is measured in when it is compared with a stored time "
        "baseline (recording uses --hpml-record-processes); they share --hpml-bench-time, and "
        "pooling them cancels what is peculiar to one process (memory layout, core placement), "
        "which per-round normalization cannot",
        parse_processes,
        "3",
        "N",
        summary="processes measuring a benchmark, to compare",
        opts_in=True,
        stored_only=True,
    ),
    Option(
        "record-processes",
        "record_processes",
        "fresh processes a baseline is recorded in (update, append), each measuring as long as "
        "one process of a comparison: more than --hpml-processes because the baseline's error "
        "enters every later verdict, and a baseline is recorded once and compared many times",
        parse_processes,
        "6",
        "N",
        summary="processes a baseline is recorded in",
        opts_in=True,
        stored_only=True,
    ),
    Option(
        "instructions",
        "instructions",
        "also count each benchmark's CPU instructions per call under valgrind's callgrind, in "
        "one more pytest process after the tests (one per side with --hpml-against), and judge "
        "them as a count within a tolerance of 0.01 (hpml_bench(tolerance={'instructions': "
        "...}) per test): no neighbour on the machine moves them; needs valgrind and minutes. "
        "all (the option alone) counts every benchmark; changed only those whose work counters "
        "differ from the other side's or the baseline's, or whose time is not a pass settled "
        "within the threshold (Note [Changed benchmarks]); off counts none. A value only as "
        "--hpml-instructions=VALUE",
        parse_instructions,
        "off",
        "all|changed|off",
        bare="all",
        summary="CPU instructions per call, under callgrind",
        opts_in=True,
    ),
    Option(
        "counters",
        "counters",
        "which grown work counters fail a judging run: classes (host syncs, copies between "
        "devices, host tensors and FLOPs on any increase; operators, allocations, saved "
        "tensors and instruction counts only beyond 5 percent, else shown as changed; views "
        "never: Note [Counter policy]) or strict (any increase fails)",
        parse_counter_policy,
        "classes",
        "POLICY",
        summary="counters that fail: classes, strict",
        opts_in=True,
    ),
    Option(
        "peak-flops",
        "peak_flops",
        "the dense peak FLOP/s (989e12: an H100 SXM in bf16) that every benchmark's mfu metric "
        "divides its FLOP/s by, whatever its device and precision; without it, a "
        "pytest_hpml_peak_flops hook's, else pytest-hpml's table of GPUs (none for the CPU)",
        parse_peak_flops,
        "",
        "FLOPS",
        summary="the device's dense peak FLOP/s, for mfu",
        opts_in=True,
    ),
    Option(
        "machine",
        "machine",
        "a human-readable name for this machine in baseline files and reports",
        parse_text,
        "",
        "NAME",
        summary="a readable name for this machine",
        opts_in=True,
    ),
    Option(
        "machine-id",
        "machine_id",
        "which machine of its kind this is, for its time baselines: a name that only this "
        "machine is given (a runner's own, in a container or a cloned VM); default: this "
        "installation's machine id (Note [Machine instance])",
        parse_text,
        "",
        "ID",
        summary="which machine of its kind this one is",
        stored_only=True,
    ),
    Option(
        "report",
        "report",
        "write every benchmark metric, verdict, the fingerprint and the commit to this JSON file",
        parse_text,
        "",
        "PATH",
        summary="write the JSON report to PATH",
        opts_in=True,
    ),
    Option(
        "report-md",
        "report_md",
        "write a Markdown summary of the verdicts (for a pull-request comment; appended when "
        "the path is $GITHUB_STEP_SUMMARY)",
        parse_text,
        "",
        "PATH",
        summary="write a Markdown summary to PATH",
        opts_in=True,
    ),
    Option(
        "report-html",
        "report_html",
        "write a standalone HTML report with plots (needs matplotlib)",
        parse_text,
        "",
        "PATH",
        summary="write an HTML report with plots to PATH",
        opts_in=True,
    ),
    Option(
        "history",
        "history",
        "add this run's results (the JSON report, with the commit's time) to the history in "
        "this directory, one new file per run, never overwriting one; pytest-hpml history "
        "DIR finds the commits where a metric stepped (Note [History])",
        parse_text,
        "",
        "DIR",
        summary="add this run to the history in DIR",
        opts_in=True,
    ),
    Option(
        "run-slow",
        "run_slow",
        "run tests marked @pytest.mark.slow (deselected otherwise)",
        parse_bool,
        "false",
        flag=True,
        summary="run tests marked @pytest.mark.slow",
    ),
)


class Settings(NamedTuple):
    """The resolved values of every option, and where each one came from."""

    devices: tuple[str, ...]
    precisions: tuple[str, ...]
    backends: tuple[str, ...]
    dist_backend: str
    dist_timeout: float
    max_ranks: int | None  # None: auto
    workers: tuple[int, ...]
    seed: int
    benchmarks: bool
    baseline: str
    baseline_dir: str
    threshold: float
    bench_time: float
    against: str
    pairs: int
    against_python: str
    against_paths: tuple[str, ...]
    threads: int | None  # None: auto
    processes: int
    record_processes: int
    instructions: Literal[False, "all", "changed"]
    counters: str
    peak_flops: float | None  # None: the hook's, or the table's
    machine: str
    machine_id: str
    report: str
    report_md: str
    report_html: str
    history: str
    run_slow: bool
    sources: dict[str, str]  # option -> where its value came from


SETTINGS_KEY = pytest.StashKey[Settings]()


GROUP = "pytest-hpml (each option is also an hpml_* ini key and an HPML_* variable)"


def register(parser: pytest.Parser) -> None:
    """Add every option to the ``hpml`` group, with its one-line summary and default, and its
    ini key, whose help points to the option."""
    group = parser.getgroup("hpml", GROUP)
    for opt in OPTIONS:
        # a flag's default is off; a value's default is shown
        shown = (
            opt.summary if opt.flag or not opt.default else f"{opt.summary} (default {opt.default})"
        )
        if opt.flag:
            group.addoption(
                opt.cli,
                action="store_true",
                default=None,
                dest=f"hpml_{opt.dest}",
                help=shown,
            )
            parser.addini(opt.ini, f"see {opt.cli}", type="bool", default=None)
        else:
            bare = {"nargs": "?", "const": opt.read(opt.bare)} if opt.bare else {}
            group.addoption(
                opt.cli,
                type=opt.read,  # the parser of every source: a blank value is BLANK
                default=None,
                dest=f"hpml_{opt.dest}",
                metavar=opt.metavar,
                help=shown,
                **bare,
            )
            parser.addini(opt.ini, f"see {opt.cli}", default=None)


def _from(opt: Option, source: str, raw: Any) -> Any:
    """Read a value from the environment or the ini file, as a usage error if bad."""
    try:
        return opt.read(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def values_given(config: pytest.Config, opt: Option) -> Iterator[tuple[str, Any]]:
    """Each value ``opt`` is given, highest precedence first, as (source, value read): BLANK
    for an empty or blank one."""
    cli = config.getoption(f"hpml_{opt.dest}")  # read by argparse already
    if cli is not None:
        yield opt.cli, cli
    env = os.environ.get(opt.env)
    if env is not None:
        yield opt.env, _from(opt, given(opt.env, env.strip()), env)
    ini = _ini(config, opt)
    if ini is not None:
        where = f"{given(f'ini {opt.ini}', ini)} ({config.inipath})"
        yield f"ini {opt.ini}", _from(opt, where, ini)


def _ini(config: pytest.Config, opt: Option) -> Any:
    """The ini value of ``opt``, None if unset. An on/off key is pytest's ``bool`` type, which
    refuses what is not a truth value before pytest-hpml sees it; its message quotes the value:
    a blank one is unset here too (Note [Blank values]), any other a usage error naming the key.
    Every other key is text: a TOML list or number is a usage error saying how to write it."""
    try:
        with warnings.catch_warnings():  # pytest 9 deprecates what _not_text refuses below
            warnings.simplefilter("ignore")
            value = config.getini(opt.ini)
    except (ValueError, TypeError, pytest.UsageError) as exc:  # pytest 9: as UsageError
        if not opt.flag:  # pytest 9's [tool.pytest] table: "expects a string, got int: 12"
            value = _literal((re.search(r"got \w+: (.*)$", str(exc)) or [None, None])[1])
            if not (isinstance(value, bool) and opt.bare):  # a bool is read below
                raise pytest.UsageError(_not_text(config, opt, value)) from None
        else:
            found = re.search(r"truth value (['\"])(.*)\1", str(exc))
            if found is not None and not found.group(2).strip():
                return BLANK
            raise pytest.UsageError(
                f"ini {opt.ini} ({config.inipath}): expected true or false ({exc})"
            ) from None
    if isinstance(value, bool) and opt.bare:  # TOML's true for an option also on and off
        value = str(value).lower()
    if value is not None and not opt.flag and not isinstance(value, str):
        raise pytest.UsageError(_not_text(config, opt, value))  # [tool.pytest.ini_options]
    return value


def _literal(text: str | None) -> Any:
    """The TOML value pytest's message quotes (its repr), None if it cannot be read back."""
    try:
        return ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return None


TOML_TYPES = {list: "list", int: "integer", float: "number", bool: "boolean", dict: "table"}


def _not_text(config: pytest.Config, opt: Option, value: Any) -> str:
    """The usage error of a TOML value that is no string: every option's ini key is one, a
    comma list written as one string (``"fp32,bf16"``), a number in quotes."""
    where = f"ini {opt.ini} ({config.inipath})"
    if value is None:
        return f"{where}: a TOML value that is no string; write it in quotes"
    kind = TOML_TYPES.get(type(value), type(value).__name__)
    items = value if isinstance(value, list) else [value]
    text = ",".join(json.dumps(v) if isinstance(v, bool) else str(v) for v in items)
    return (
        f"{given(f'ini {opt.ini}', value)} ({config.inipath}): a TOML {kind}, where "
        f"pytest-hpml reads a string; write {opt.ini} = {json.dumps(text)}"
    )


def explicit(source: str) -> bool:
    """Whether a value was given for this run, on the command line or in the environment, as
    opposed to the ini file's standing configuration or a default."""
    return source.startswith(("--", "HPML_"))


def resolve(config: pytest.Config) -> Settings:
    """Resolve every option: command line > environment > ini > default, a blank value unset;
    then check the combinations. Each blank value consulted is said once."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    blanks: dict[str, list[str]] = {}
    for opt in OPTIONS:
        values[opt.dest], sources[opt.dest] = opt.parse(opt.default), "default"
        for source, value in values_given(config, opt):
            if value == BLANK:
                blanks.setdefault(opt.dest, []).append(source)
            else:
                values[opt.dest], sources[opt.dest] = value, source
                break
    _opt_in(values, sources)
    _check_benchmark_plugin(config, values, sources)
    _check_off(values, sources)
    _check_needs(values, sources)
    _check_against(values, sources)
    _check_timing_off(config, values, sources)
    _check_xdist(config, values, sources)
    for opt in OPTIONS:
        for source in blanks.get(opt.dest, []):
            say(config, f"{source} is blank: treated as unset ({_instead(opt, sources)})")
    for said in _unknown_variables(os.environ):
        say(config, said)
    return Settings(**values, sources=sources)


def _unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """What to say of each ``HPML_*`` variable that is no option (``HPML_TRESHOLD``): ignored,
    and the option it may stand for. pytest says the same of an unknown ini key; the internal
    variables (:data:`INTERNAL_PREFIXES`) are no user's."""
    known = sorted(opt.env for opt in OPTIONS)
    said = []
    for name in sorted(environ):
        if not name.startswith("HPML_") or name in known or name.startswith(INTERNAL_PREFIXES):
            continue
        # compared without the HPML_ all share: HPML_FOO is no near miss of HPML_REPORT
        near = difflib.get_close_matches(name[5:].upper(), [k[5:] for k in known], n=1)
        hint = f"did you mean HPML_{near[0]}?" if near else "pytest --help lists the options"
        said.append(f"{name} is no option of pytest-hpml and is ignored; {hint}")
    return said


def _instead(opt: Option, sources: dict[str, str]) -> str:
    """What gives ``opt`` its value where a blank one was passed over."""
    if sources[opt.dest] != "default":
        return f"{sources[opt.dest]} applies"
    return f"default {opt.default}" if opt.default else "default: none"


def say(config: pytest.Config, message: str) -> None:
    """A warning at configure time, in the warnings summary; a usage error where the run's
    -W or filterwarnings turn warnings into errors (else pytest shows an INTERNALERROR)."""
    try:
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=2)
    except pytest.PytestConfigWarning:
        raise pytest.UsageError(f"{message}; an error under this run's warning filters") from None


def _drop(source: str) -> str:
    """How to take back a value given by ``source``."""
    return f"unset {source}" if source.startswith("HPML_") else f"drop {source}"


def _check_against(values: dict[str, Any], sources: dict[str, str]) -> None:
    """--hpml-against judges against the base revision: it records no baseline, and it needs
    the benchmarks measured the pytest-hpml way."""
    if not values["against"]:
        return
    if values["baseline"] in ("update", "append"):
        raise pytest.UsageError(
            f"{sources['against']} compares with a git revision and records no baseline; "
            f"drop {sources['baseline']}={values['baseline']}, or record in a run without "
            "--hpml-against"
        )
    if values["history"]:  # its values are the pairs', not this commit's as a nightly's are
        raise pytest.UsageError(
            f"{sources['against']} measures two revisions in pairs; {sources['history']} keeps "
            "the history of one commit's runs: give one of them"
        )
    if not values["benchmarks"]:
        raise pytest.UsageError(
            f"{sources['against']} judges benchmarks, but {sources['benchmarks']} turned "
            "pytest-hpml's benchmarks off"
        )


def _check_timing_off(
    config: pytest.Config, values: dict[str, Any], sources: dict[str, str]
) -> None:
    """--benchmark-disable runs each benchmark once and times nothing: a run that records
    baselines or judges head against base would then do neither, without a word."""
    if not values["benchmarks"] or not getattr(config.option, "benchmark_disable", False):
        return
    if values["baseline"] in ("update", "append"):
        asked = f"{sources['baseline']}={values['baseline']} records baselines"
    elif values["against"]:
        asked = f"{sources['against']} measures both sides"
    else:
        return
    raise pytest.UsageError(
        f"--benchmark-disable times nothing, but {asked}: nothing would be measured; drop "
        "--benchmark-disable (from addopts too), or run without it"
    )


def _check_xdist(config: pytest.Config, values: dict[str, Any], sources: dict[str, str]) -> None:
    """pytest-xdist's workers run the tests: head against base measured no pair there, and
    ``--dist each`` gave each benchmark once a worker, counted as that many."""
    workers = getattr(config.option, "numprocesses", None)
    if not workers or not values["benchmarks"]:
        return
    if values["against"]:
        raise pytest.UsageError(
            f"{sources['against']} measures in pairs of processes of its own, which pytest-xdist's "
            f"workers (-n {workers}) would not run; run it without -n"
        )
    if getattr(config.option, "dist", "") == "each":
        raise pytest.UsageError(
            "--dist each runs every benchmark on every worker, and pytest-hpml would count each "
            "once a worker; use --dist load (or another mode that runs a test once)"
        )


# Options that mean something only beside another: option -> the one it needs.
NEEDS = {opt.dest: opt.needs for opt in OPTIONS if opt.needs}


def _check_needs(values: dict[str, Any], sources: dict[str, str]) -> None:
    """An option given for this run without the option it works with would be ignored."""
    for dest, needed in NEEDS.items():
        if explicit(sources[dest]) and not values[needed]:
            cli = _cli(needed)
            raise pytest.UsageError(
                f"{sources[dest]} applies only with {cli}, which is not given; give {cli}, "
                f"or {_drop(sources[dest])}"
            )


def typed(config: pytest.Config, source: str) -> bool:
    """Whether a value was typed on this run's command line, not standing configuration (the
    ini file, its addopts, PYTEST_ADDOPTS, a CI's environment) that serves other runs too."""
    args = [str(arg) for arg in config.invocation_params.args]
    return source.startswith("--") and any(
        arg == source or arg.startswith(f"{source}=") for arg in args
    )


def _cli(dest: str) -> str:
    """The command-line flag of the option kept in ``dest``."""
    return next(opt.cli for opt in OPTIONS if opt.dest == dest)


# Options that only stored baselines read: their processes, directory and machine.
STORED_ONLY = tuple(opt.dest for opt in OPTIONS if opt.stored_only)


def _unread(
    config: pytest.Config, values: dict[str, Any], sources: dict[str, str]
) -> dict[str, tuple[str, str]]:
    """The options this run's mode never reads: (why, in words; what else to do, if any)
    (Note [Unread options])."""

    def named(dest: str) -> str:
        if sources[dest] == "default":
            return f"{_cli(dest)}={values[dest]} (the default)"
        return given(sources[dest], values[dest])

    unread: dict[str, tuple[str, str]] = {}
    workers = getattr(config.option, "numprocesses", None)
    if workers:
        xdist = f"under pytest-xdist (-n {workers}), whose workers"
        for dest in ("processes", "record_processes", "threads"):
            unread[dest] = (f"{xdist} time nothing", ", or run without -n")
        unread["instructions"] = (f"{xdist} count no instructions", ", or run without -n")
    if values["against"]:
        why = f"with {named('against')}, which measures in pairs and uses no stored baseline"
    elif values["baseline"] == "off":
        why = f"with {named('baseline')}, which neither reads nor records stored baselines"
    else:
        why = ""
    for dest in STORED_ONLY if why else ():
        unread.setdefault(dest, (why, ""))
    if not why and values["baseline"] == "compare":
        unread["record_processes"] = (f"with {named('baseline')}, which records no baseline", "")
    return {dest: said for dest, said in unread.items() if values[dest]}


def check_unread(config: pytest.Config, chosen: Settings) -> None:
    """An option typed for this run that its mode never reads would do nothing unsaid; the
    same value in standing configuration serves other runs, and is let be. Asked in the
    user's own process: the processes pytest-hpml starts are given options of their own."""
    values, sources = chosen._asdict(), chosen.sources
    for dest, (why, other) in _unread(config, values, sources).items():
        if typed(config, sources[dest]):
            raise pytest.UsageError(
                f"{given(sources[dest], values[dest])} is not read {why}; "
                f"{_drop(sources[dest])}{other}"
            )


def _check_off(values: dict[str, Any], sources: dict[str, str]) -> None:
    """A benchmark option given for this run while pytest-hpml's benchmarks are turned off
    (HPML_BENCHMARKS=0, ini hpml_benchmarks = false) would be ignored."""
    if values["benchmarks"] or sources["benchmarks"] == "default":
        return
    given = [sources[dest] for dest in BENCHMARK_OPTIONS if explicit(sources[dest])]
    if given:
        raise pytest.UsageError(
            f"{given[0]} is an option of pytest-hpml's benchmarks, but "
            f"{sources['benchmarks']} turned them off; {_drop(given[0])}, or turn them on "
            "with --hpml-benchmarks"
        )


def _check_benchmark_plugin(
    config: pytest.Config, values: dict[str, Any], sources: dict[str, str]
) -> None:
    """pytest-hpml's benchmarks measure through pytest-benchmark's fixture: without that plugin
    (``-p no:benchmark``, or not loaded) a run that asks for them is a usage error; standing
    configuration asking for them (the ini file) is set aside, and said."""
    plugin = sys.modules.get("pytest_benchmark.plugin")
    if not values["benchmarks"] or (plugin and config.pluginmanager.is_registered(plugin)):
        return
    blocked = config.pluginmanager.is_blocked("benchmark")
    why = "-p no:benchmark" if blocked else "pytest-benchmark (not loaded)"
    said = "is disabled (-p no:benchmark)" if blocked else "is not loaded (add -p benchmark)"
    asked = (sources["benchmarks"], *(sources[dest] for dest in BENCHMARK_OPTIONS))
    given = [source for source in asked if explicit(source)]
    if given:
        raise pytest.UsageError(
            f"pytest-benchmark {said}, but {given[0]} asks for pytest-hpml's benchmarks, "
            "which measure with its benchmark fixture; drop one"
        )
    say(
        config,
        f"pytest-benchmark {said}: pytest-hpml's benchmarks, turned on by "
        f"{sources['benchmarks']}, are off for this run",
    )
    values["benchmarks"], sources["benchmarks"] = False, why


# The options that only mean something for hpml benchmarks: giving one opts the run in.
BENCHMARK_OPTIONS = tuple(opt.dest for opt in OPTIONS if opt.opts_in)


def _opt_in(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Benchmarks are pytest-hpml's only where the run says so (Note [Opting in])."""
    if sources["benchmarks"] != "default":
        return
    given = [sources[dest] for dest in BENCHMARK_OPTIONS if sources[dest] != "default"]
    if given:
        values["benchmarks"], sources["benchmarks"] = True, given[0]
