"""Lines pytest-hpml adds to the report header."""

from __future__ import annotations

import sys

import pytest

from .devices import hardware
from .fixtures import devices
from .options import Settings


def settings_line(settings: Settings) -> str:
    """What this run selected, and the seed."""
    return (
        f"hpml: device={','.join(settings.devices)} precision={','.join(settings.precisions)} "
        f"backend={','.join(settings.backends)} dist-backend={settings.dist_backend} "
        f"workers={','.join(map(str, settings.workers))} seed={settings.seed}"
    )


def hardware_line(config: pytest.Config) -> str:
    """The torch build, the devices it sees and the ones the tests will run on."""
    return f"hpml: {hardware(config).describe()}; running on {', '.join(devices(config))}"


def torch_imported() -> bool:
    """Whether torch is loaded already, so describing the hardware costs nothing extra."""
    return "torch" in sys.modules
