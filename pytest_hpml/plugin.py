"""pytest-hpml's entry point (``pytest11: hpml``): hooks only, each handing its work to the
layer that owns it (see README, "Layout").

The plugin loads into every pytest run of an environment where it is installed, so this module
imports only what registering the options and markers needs; a layer is imported by the first
hook that has work for it (Note [Start-up cost] in docs/notes.md). torch is never imported here.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from . import hookspecs
from .config import markers, options, resolution


@pytest.hookimpl
def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Add the ``pytest_hpml_*`` extension points."""
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl
def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the --hpml-* options and hpml_* ini keys."""
    options.register(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A process asked to measure again, or a spawned rank, ends quickly, and arranges it
    before any conftest can import torch (Note [Cheaper processes])."""
    from .config import role

    if role.RERUN_ENV in os.environ:
        role.end_quickly()


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    """Resolve the options (command line > environment > ini); register markers and fixtures;
    give this process the plugins of its role."""
    from .bench import fixture as bench_fixture
    from .config import role
    from .fixtures import fixtures

    markers.register(config)
    chosen = config.stash[resolution.SETTINGS_KEY] = resolution.resolve(config)
    if role.is_controller(config):
        resolution.check_unread(config, chosen)
    config.pluginmanager.register(fixtures, "hpml-fixtures")
    if chosen.benchmarks:  # else pytest-benchmark's fixture is left alone (Note [Opting in])
        config.pluginmanager.register(bench_fixture, "hpml-benchmark")
    config.pluginmanager.register(Collector(config), "hpml-verdicts")

    def budget(test: str) -> float:
        from .run.session import verdicts

        return verdicts(config).budget(test)

    def reference(device: Any, sync: Any) -> Any:
        if chosen.against:  # the pairs judge raw times side by side (Note [Cheaper processes])
            return None
        return config.hook.pytest_hpml_reference_workload(config=config, device=device, sync=sync)

    def peak(device: Any, precision: str) -> Any:
        if chosen.peak_flops is not None:  # the run's own figure: no hook is asked
            return chosen.peak_flops
        return config.hook.pytest_hpml_peak_flops(config=config, device=device, precision=precision)

    def peak_beyond_table() -> bool:  # besides pytest-hpml's own implementation (the table)
        implementations = config.hook.pytest_hpml_peak_flops.get_hookimpls()
        return chosen.peak_flops is not None or len(implementations) > 1

    asked = role.rerun_request()
    rerun = None
    if asked is not None:  # a process started to measure benchmarks again
        from .bench.rerun import Rerun
        from .run.session import verdicts

        rerun = Rerun(asked, results=lambda: [r.to_dict() for r in verdicts(config).results])
        config.pluginmanager.register(rerun, "hpml-rerun")
    callgrind = bench_fixture.callgrind(asked)
    # one thread under valgrind (Note [Instruction counts])
    threads = 1 if callgrind is not None else role.measuring_threads(config)
    config.stash[bench_fixture.BENCH_SESSION_KEY] = bench_fixture.BenchSession(
        budget,
        reference,
        threads,
        thread_clock=bool(chosen.against) and threads == 1,
        seed=chosen.seed,
        xdist_worker=role.role(config) is role.Role.XDIST_WORKER,
        callgrind=callgrind,
        counts=bench_fixture.counts(asked),
        peaks=bench_fixture.Peaks(peak, peak_beyond_table),
        take_turn=rerun.take_turn if rerun is not None else lambda: None,
        pass_turn=rerun.pass_turn if rerun is not None else lambda: None,
        slice=rerun.slice if rerun is not None else 0.0,
        paired=rerun is not None and rerun.paired,
    )
    launched = role.launch(config)
    if launched is not None:  # one of several ranks
        from .distributed.rank import Rank

        config.pluginmanager.register(Rank(config, launched), "hpml-rank")
    if role.role(config) is role.Role.XDIST_WORKER or getattr(config.option, "numprocesses", None):
        from .hardware import gpus

        gpus.take_slice(config)  # an xdist worker sees only its GPUs, before CUDA starts here
        gpus.schedule(config)
        if gpus.share(config) is not None:
            from .distributed.leases import HeldGpus, SharedGpus

            config.pluginmanager.register(SharedGpus(budget), "hpml-gpu-share")
            config.pluginmanager.register(HeldGpus(), "hpml-gpu-hold")
    if chosen.against and role.is_controller(config):
        from .bench import sides

        sides.prepare(config, chosen, launched=role.launch(config) is not None)
    if chosen.report_html:
        from .report.html import check_html

        check_html(chosen)
    # Checked before the tests where the end of the run writes (comparing, a bad baseline
    # directory is said where it is read: the check costs a plain run its start-up modules).
    mode = role.duty(config).baseline if chosen.benchmarks else "off"
    reports = chosen.report or chosen.report_md or chosen.report_html or chosen.history
    if role.is_controller(config) and (mode in ("update", "append") or reports):
        from .report.files import check_paths

        check_paths(chosen, mode, config.rootpath)


@pytest.hookimpl
def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show the selection and seed; the hardware too if torch is loaded already."""
    from .report import header

    return header.lines(config)


@pytest.hookimpl
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Check the test's hpml markers and parametrize the hpml fixtures it uses."""
    if markers.problem(metafunc.definition):  # the test fails at setup, saying what is wrong
        return
    from .fixtures.fixtures import parametrize

    parametrize(metafunc)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect slow tests unless asked for; check the hardware and backends hpml tests need."""
    from .fixtures.fixtures import check_selection, uses_hpml
    from .report import header

    chosen = config.stash[resolution.SETTINGS_KEY]
    if not chosen.run_slow:
        markers.deselect_slow(config, items)
    markers.warn_unused_marks(items, chosen.benchmarks)
    if any(uses_hpml(item) for item in items):
        check_selection(config, items)
        header.hardware_checked(config)


@pytest.hookimpl
def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """Show the hardware once hpml tests were collected (torch is needed for them anyway),
    and both sides of --hpml-against."""
    from .report import header

    return header.after_collection(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run a distributed test in ranks of its own and report it as one test (in an xdist
    worker holding GPUs, its ``SharedGpus`` plugin does this)."""
    if not markers.runs_in_ranks(item):
        return None
    if item.config.pluginmanager.has_plugin("hpml-gpu-share"):
        return None
    from .bench.sides import rank_forker
    from .distributed.spawn import spawn_protocol
    from .run.session import verdicts

    forker = functools.partial(rank_forker, item.config)
    return spawn_protocol(item, nextitem, budget=verdicts(item.config).budget, forker=forker)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test whose hpml marks are wrong; skip a @pytest.mark.gpu test unless the GPUs it
    asks for are visible."""
    wrong = markers.problem(item) or (
        markers.benchmark_problem(item)
        if item.config.stash[resolution.SETTINGS_KEY].benchmarks
        else None
    )
    if wrong:
        pytest.fail(f"{item.nodeid}: {wrong}", pytrace=False)
    mark = item.get_closest_marker("gpu")
    if mark is None:
        return
    from .hardware.devices import hardware

    try:
        requirement = markers.gpu_requirement(mark)
    except markers.MarkerError as exc:  # a mark added after collection
        pytest.fail(f"wrong @pytest.mark.gpu: {exc}", pytrace=False)
    reason = markers.gpu_skip_reason(requirement, hardware(item.config))
    if reason:  # a skip mark, so that pytest reports the test's location, not this hook's
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Judge a passed benchmark's metrics and attach them to its call report."""
    from .bench.fixture import BENCHMARK_KEY, PROPERTY

    report = yield
    if call.when == "call" and report.passed and BENCHMARK_KEY in item.stash:
        from .run.session import verdicts

        payload = verdicts(item.config).payload(item)
        if payload is not None:
            report.user_properties.append((PROPERTY, payload.to_dict()))  # the wire: JSON
    return report


@pytest.hookimpl(trylast=True)
def pytest_hpml_reference_workload(config: pytest.Config, device: Any, sync: Any) -> Any:
    """The default reference workload (see the hook spec)."""
    from .bench.reference import Reference

    return Reference(device, sync)


@pytest.hookimpl(trylast=True)
def pytest_hpml_fingerprint(config: pytest.Config) -> Any:
    """The default fingerprint: CPU, cores, GPUs, driver, CUDA, torch, Python, system."""
    from .hardware import fingerprint
    from .hardware.devices import hardware

    named = config.stash[resolution.SETTINGS_KEY].machine_id
    return fingerprint.current(hardware(config), named_instance=named)


@pytest.hookimpl(trylast=True)
def pytest_hpml_peak_flops(config: pytest.Config, device: Any, precision: str) -> Any:
    """The default peak: pytest-hpml's table of GPUs; None for the CPU or a GPU it lacks."""
    from .hardware.peaks import device_peak

    return device_peak(device, precision)


@pytest.hookimpl(trylast=True)
def pytest_hpml_judge_metric(
    record: dict[str, Any], baseline: dict[str, Any] | None, threshold: float
) -> Any:
    """The default verdict: the judge the metric's kind names."""
    from .verdict.judge import judge_metric

    return judge_metric(record, baseline, threshold)


class Collector:
    """The session-wide hooks that need the config: collecting verdicts from every report,
    finishing the session, and the summary where this process reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the verdicts of every test, whichever process ran it."""
        from .bench.fixture import PROPERTY

        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, dict):
                from .run.session import verdicts

                verdicts(self.config).collect(value)

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """With --hpml-against, start the first pair while the tests run (Note [Cheaper
        processes])."""
        if self.config.stash[resolution.SETTINGS_KEY].against:
            from .config.role import is_controller
            from .run.pairs import start_pairs, unasked_hooks

            for said in unasked_hooks(self.config) if is_controller(self.config) else ():
                try:
                    warnings.warn(pytest.PytestConfigWarning(said), stacklevel=1)
                except pytest.PytestConfigWarning:  # -W error: said as an error
                    error = f"{said}; an error under this run's warning filters"
                    raise pytest.UsageError(error) from None
            start_pairs(self.config, session.items)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Measure again, write reports, record baselines, fail the session on a regression."""
        # The verdict layer is imported by the first benchmark: before that, nothing to report
        # but the report files asked for, which are written whatever happened.
        judged = sys.modules.get("pytest_hpml.run.session")
        chosen = self.config.stash[resolution.SETTINGS_KEY]
        outputs = chosen.report or chosen.report_md or chosen.report_html or chosen.history
        if judged is None and outputs:
            from .run import session as judged
        if (
            judged is None
            and chosen.benchmarks
            and getattr(session.config.option, "numprocesses", None)
        ):
            from .run import session as judged  # it may say why nothing was recorded
        found = None if judged is None else judged.reported(self.config)
        try:
            if found is not None:
                from .report.summary import REPORTING
                from .run.finish import finish

                finish(session, found, REPORTING)
        finally:
            against = self.config.pluginmanager.get_plugin("hpml-against-finish")
            if against is not None:  # the pairs are over (Note [Ending signals])
                against.hold()

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the verdict table, then what regressed, improved or could not be read."""
        judged = sys.modules.get("pytest_hpml.run.session")
        found = None if judged is None else judged.reported(self.config)
        if found is not None:
            from .report.summary import terminal

            terminal(terminalreporter, found)
