"""pytest-hpml's entry point (``pytest11: hpml``): options and hooks only.

Importing this module must not import torch: the plugin loads into every pytest run of an
environment where it is installed. Each hook hands its work to the module that owns it.
"""

from __future__ import annotations

import pytest

from . import distributed, fixtures, gpus, header, markers, options, processes, reports
from .devices import hardware
from .fixtures import check_selection, parametrize, settings, uses_hpml
from .regression import regression

# Set once the session has printed the hardware line, so it is shown once.
HARDWARE_SHOWN = pytest.StashKey[bool]()
HPML_ITEMS = pytest.StashKey[bool]()


@pytest.hookimpl
def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the --hpml-* options and hpml_* ini keys."""
    options.register(parser)


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    """Resolve the options (command line > environment > ini); register markers and fixtures."""
    markers.register(config)
    config.pluginmanager.register(fixtures, "hpml-fixtures")
    config.stash[options.SETTINGS_KEY] = options.resolve(config)
    asked = processes.rerun_request()
    if asked is not None:  # a process started to measure benchmarks again
        config.stash[options.SETTINGS_KEY] = processes.rerun_settings(settings(config), asked)
        config.pluginmanager.register(processes.Rerun(asked), "hpml-rerun")
    gpus.take_slice(config)  # an xdist worker sees only its GPUs, before CUDA starts here
    config.stash[gpus.SCHEDULER_KEY] = gpus.schedule(config)
    here = distributed.launch(config)
    if here is not None:  # one of several ranks: measured here alone, reported by rank 0
        config.stash[options.SETTINGS_KEY] = distributed.rank_settings(settings(config), here)
        config.pluginmanager.register(distributed.Rank(config, here), "hpml-rank")
    reports.check_html(config.stash[options.SETTINGS_KEY])
    config.pluginmanager.register(regression(config), "hpml-regression")


@pytest.hookimpl
def pytest_report_header(config: pytest.Config) -> list[str]:
    """Show the selection and seed; the hardware too if torch is loaded already."""
    lines = [header.settings_line(settings(config))]
    scheduler = config.stash.get(gpus.SCHEDULER_KEY, None)
    if scheduler is not None:
        lines.append(scheduler.header())
    if header.torch_imported():
        lines.append(header.hardware_line(config))
        config.stash[HARDWARE_SHOWN] = True
    return lines


@pytest.hookimpl
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Check the test's hpml markers and parametrize the hpml fixtures it uses."""
    markers.check(metafunc.definition)
    parametrize(metafunc)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect slow tests unless asked for; check the hardware and backends hpml tests need."""
    if not settings(config).run_slow:
        markers.deselect_slow(config, items)
    if not any(uses_hpml(item) for item in items):
        return
    check_selection(config, items)
    config.stash[HPML_ITEMS] = True  # checked: the hardware line may be shown


@pytest.hookimpl
def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """Show the hardware once hpml tests were collected (torch is needed for them anyway)."""
    if config.stash.get(HPML_ITEMS, False) and not config.stash.get(HARDWARE_SHOWN, False):
        return [header.hardware_line(config)]
    return []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run a distributed test in ranks of its own (or a test needing more GPUs than this xdist
    worker has, on leased GPUs) and report it as one test."""
    return distributed.spawn_protocol(item, nextitem)


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_protocol")
def hold_gpus(item: pytest.Item) -> object:
    """Hold this xdist worker's GPUs while a test that uses them runs."""
    with distributed.gpus_held(item):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a @pytest.mark.gpu test unless the GPUs it asks for are visible."""
    mark = item.get_closest_marker("gpu")
    if mark is None:
        return
    try:
        requirement = markers.gpu_requirement(mark)
    except markers.MarkerError as exc:  # a mark added after collection
        pytest.fail(f"wrong @pytest.mark.gpu: {exc}", pytrace=False)
    reason = markers.gpu_skip_reason(requirement, hardware(item.config))
    if reason:  # a skip mark, so that pytest reports the test's location, not this hook's
        item.add_marker(pytest.mark.skip(reason=reason))
