"""Options of pytest-hpml: one table serves the ``--hpml-*`` flags, ``hpml_*`` ini keys and
``HPML_*`` environment variables.

Each option's help, summary and parser are written once, in :data:`OPTIONS`; the settings, the
options that need another, the opt-in set and the options only stored baselines read are read
from it. Values are parsed by :mod:`.values`, and resolved from every source by
:mod:`.resolution`.
"""

from __future__ import annotations

import argparse
import unicodedata
from typing import Any, Callable, NamedTuple

import pytest

from .values import (
    BLANK,
    MAX_LENGTH,
    parse_backends,
    parse_baseline_mode,
    parse_bool,
    parse_counter_policy,
    parse_devices,
    parse_dist_backend,
    parse_fraction,
    parse_instructions,
    parse_max_ranks,
    parse_pairs,
    parse_paths,
    parse_peak_flops,
    parse_precisions,
    parse_processes,
    parse_seconds,
    parse_seed,
    parse_text,
    parse_threads,
    parse_workers,
)


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
    # the name it had before 0.1, read until 0.2 with a deprecation warning (Note [Renamed])
    old: str = ""

    @property
    def cli(self) -> str:
        return f"--hpml-{self.name}"

    @property
    def former(self) -> Option | None:
        """This option under its old name (its value in ``hpml_old_DEST``), None if it has none."""
        if not self.old:
            return None
        return self._replace(name=self.old, dest=f"old_{self.dest}", old="")

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
        "loader-workers",
        "loader_workers",
        "DataLoader worker count(s) for the num_workers fixture, a comma list; auto picks one "
        "per CPU this process may use (at most 8)",
        parse_workers,
        "0",
        "COUNTS",
        summary="DataLoader worker counts to test, or auto",
        old="workers",
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
        "which grown work counters fail a judging run: lenient (host syncs, copies between "
        "devices, host tensors and FLOPs on any increase; operators, allocations, saved "
        "tensors and instruction counts only beyond 5 percent, else shown as changed; views "
        "never: Note [Counter policy]) or strict (any increase fails); classes, lenient's "
        "former word, is read until 0.2 with a deprecation warning",
        parse_counter_policy,
        "lenient",
        "POLICY",
        summary="counters that fail: lenient, strict",
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


GROUP = "pytest-hpml (each option is also an hpml_* ini key and an HPML_* variable)"


def register(parser: pytest.Parser) -> None:
    """Add every option to the ``hpml`` group, with its one-line summary and default, and its
    ini key, whose help points to the option; an old name without a help line."""
    group = parser.getgroup("hpml", GROUP)
    for opt in OPTIONS:
        # a flag's default is off; a value's default is shown
        shown = (
            opt.summary if opt.flag or not opt.default else f"{opt.summary} (default {opt.default})"
        )
        _add(parser, group, opt, shown, f"see {opt.cli}")
        if opt.former is not None:  # the new name's help line is the one to learn
            _add(parser, group, opt.former, argparse.SUPPRESS, f"deprecated: see {opt.cli}")


def _add(
    parser: pytest.Parser, group: pytest.OptionGroup, opt: Option, shown: str, ini_help: str
) -> None:
    """``opt``'s command-line option, with ``shown`` as its help, and its ini key."""
    dest = f"hpml_{opt.dest}"
    if opt.flag:
        group.addoption(opt.cli, action="store_true", default=None, dest=dest, help=shown)
        parser.addini(opt.ini, ini_help, type="bool", default=None)
        return
    bare = {"nargs": "?", "const": opt.read(opt.bare)} if opt.bare else {}
    group.addoption(  # opt.read parses every source's value: a blank one is BLANK
        opt.cli, type=opt.read, default=None, dest=dest, metavar=opt.metavar, help=shown, **bare
    )
    parser.addini(opt.ini, ini_help, default=None)
