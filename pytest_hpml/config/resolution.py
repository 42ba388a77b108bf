"""Where each option's value comes from: command line > environment > ini > default, a blank
value unset (Note [Blank values]); every source read through :meth:`Option.read`, so a value is
accepted or refused alike from each. Then the checks of options that contradict each other or
the run's mode."""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple

import pytest

from .options import OPTIONS, Option
from .values import (
    BLANK,
    INTERNAL_PREFIXES,
    Former,
    given,
)


class Settings(NamedTuple):
    """The resolved values of every option, and where each one came from."""

    devices: tuple[str, ...]
    precisions: tuple[str, ...]
    backends: tuple[str, ...]
    dist_backend: str
    dist_timeout: float
    max_ranks: int | None  # None: auto
    loader_workers: tuple[int, ...]
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


def _from(opt: Option, source: str, raw: Any) -> Any:
    """Read a value from the environment or the ini file, as a usage error if bad."""
    try:
        return opt.read(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def values_given(config: pytest.Config, opt: Option) -> Iterator[tuple[str, Any]]:
    """Each value ``opt`` is given, highest precedence first, as (source, value read): BLANK
    for an empty or blank one. In each place its new name comes before its old one."""
    names = (opt,) if opt.former is None else (opt, opt.former)
    for named in names:
        cli = config.getoption(f"hpml_{named.dest}")  # read by argparse already
        if cli is not None:
            yield named.cli, cli
    for named in names:
        env = os.environ.get(named.env)
        if env is not None:
            yield named.env, _from(opt, given(named.env, env.strip()), env)
    for named in names:
        ini = _ini(config, named)
        if ini is not None:
            where = f"{given(f'ini {named.ini}', ini)} ({config.inipath})"
            yield f"ini {named.ini}", _from(opt, where, ini)


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
        _say_deprecated(config, opt)
        for source, value in values_given(config, opt):
            if isinstance(value, Former):  # a value's former word (Note [Renamed])
                word = f"{source}={value.old}"
                say(
                    config,
                    f"{word} is deprecated; it is {source}={value} now",
                    HpmlDeprecationWarning,
                )
                value = str(value)
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


def _say_deprecated(config: pytest.Config, opt: Option) -> None:
    """A deprecation warning for each place that gives ``opt`` by its old name, whether or not
    that value applies (Note [Renamed]): it still works until 0.2."""
    former = opt.former
    if former is None:
        return
    places = (
        (former.cli, opt.cli, config.getoption(f"hpml_{former.dest}") is not None),
        (former.env, opt.env, former.env in os.environ),
        (f"ini {former.ini}", f"ini {opt.ini}", _ini(config, former) is not None),
    )
    for old, new, present in places:
        if present:
            say(config, f"{old} is deprecated; it is {new} now", HpmlDeprecationWarning)


def _unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """What to say of each ``HPML_*`` variable that is no option (``HPML_TRESHOLD``): ignored,
    and the option it may stand for. pytest says the same of an unknown ini key; the internal
    variables (:data:`INTERNAL_PREFIXES`) are no user's."""
    known = sorted(named.env for opt in OPTIONS for named in (opt, opt.former) if named)
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


class HpmlDeprecationWarning(pytest.PytestWarning, DeprecationWarning):
    """An option or value of pytest-hpml that still works and goes in its next release."""


def say(
    config: pytest.Config,
    message: str,
    category: type[pytest.PytestWarning] = pytest.PytestConfigWarning,
) -> None:
    """A warning at configure time, in the warnings summary; a usage error where the run's
    -W or filterwarnings turn warnings into errors (else pytest shows an INTERNALERROR)."""
    try:
        config.issue_config_time_warning(category(message), stacklevel=2)
    except category:
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
