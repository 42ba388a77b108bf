"""Lines pytest-hpml adds to the report header."""

from __future__ import annotations

import sys

import pytest

from ..config.resolution import Settings
from ..config.role import settings


def settings_line(settings: Settings) -> str:
    """What this run selected, and the seed."""
    return (
        f"hpml: device={','.join(settings.devices)} precision={','.join(settings.precisions)} "
        f"backend={','.join(settings.backends)} dist-backend={settings.dist_backend} "
        f"loader-workers={','.join(map(str, settings.loader_workers))} seed={settings.seed} "
        + (
            f"benchmarks=hpml threshold={settings.threshold * 100:g}%"
            if settings.benchmarks
            else ""
        )
    ).rstrip()


def hardware_line(config: pytest.Config) -> str:
    """The torch build, the devices it sees and the ones the tests will run on."""
    from ..hardware.devices import devices, hardware

    return f"hpml: {hardware(config).describe()}; running on {', '.join(devices(config))}"


def torch_imported() -> bool:
    """Whether torch is loaded already, so describing the hardware costs nothing extra."""
    return "torch" in sys.modules


# Set once the hardware line was shown (it is shown once), and once hpml tests were collected.
HARDWARE_SHOWN = pytest.StashKey[bool]()
HPML_ITEMS = pytest.StashKey[bool]()


def lines(config: pytest.Config) -> list[str]:
    """The header: the selection and seed, the GPUs per xdist worker, and the hardware if
    torch is loaded already (describing it then costs nothing extra). Both sides of
    --hpml-against come after collection (:func:`after_collection`), but under xdist."""
    found = [settings_line(settings(config))]
    scheduler = config.pluginmanager.get_plugin("hpml-gpus")  # xdist on a machine with GPUs
    if scheduler is not None:
        found.append(scheduler.header())
    if torch_imported():
        found.append(hardware_line(config))
        config.stash[HARDWARE_SHOWN] = True
    if _no_collection(config):
        found += against_lines(config)
    return shown(found)


def _no_collection(config: pytest.Config) -> bool:
    """xdist's controller: its workers collect, and it reports no collection of its own."""
    return config.pluginmanager.has_plugin("dsession")


def shown(found: list[str]) -> list[str]:
    """``found`` as ``text.visible`` shows it: a GPU's name, CUDA_VISIBLE_DEVICES or the
    revision given to --hpml-against may hold what a terminal acts on. ``text`` (and what it
    imports) is loaded only where a line holds a character that is not printable: every run
    shows the header, and almost none needs it."""
    if all(line.isprintable() for line in found):
        return found
    from .text import visible

    return [visible(line) for line in found]


def against_lines(config: pytest.Config) -> list[str]:
    """With --hpml-against: both sides, and what differs between their environments."""
    if not settings(config).against:  # nothing more is imported for a run without it
        return []
    from ..bench.sides import AGAINST_KEY
    from . import text

    against = config.stash.get(AGAINST_KEY, None)
    if against is None:
        return []
    block = text.against_block(against)
    return [f"hpml: against: {text.sides(block, pairs=False)}", f"hpml: {text.differs(block)}"]


def hardware_checked(config: pytest.Config) -> None:
    """hpml tests were collected and their hardware checked: the hardware line may be shown."""
    config.stash[HPML_ITEMS] = True


def after_collection(config: pytest.Config) -> list[str]:
    """The hardware line, after collection, if hpml tests need it and it was not shown yet;
    then both sides of --hpml-against, where the header would have shown them. Said here,
    describing them waits for nothing: the collection has imported torch (Note [Cheaper
    processes])."""
    found = []
    if config.stash.get(HPML_ITEMS, False) and not config.stash.get(HARDWARE_SHOWN, False):
        found.append(hardware_line(config))
    header = config.get_verbosity() >= 0 and not getattr(config.option, "no_header", False)
    if header and not _no_collection(config):
        found += against_lines(config)
    return shown(found) if found else []
