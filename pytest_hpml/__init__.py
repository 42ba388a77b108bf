"""pytest-hpml: a pytest plugin and performance-regression suite for PyTorch training.

Importing the package stays cheap (no torch, nothing but what pytest loads): the plugin loads
into every pytest run. Public names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "CompileBackend",
    "Footprint",
    "Precision",
    "Shrinkage",
    "UntraceableModelError",
    "__version__",
    "assert_optimizer_matches",
    "assert_shrinks",
    "nni_speedup",
    "prune",
    "settings",
]

_PUBLIC = {
    "CompileBackend": "fixtures.compile",
    "Precision": "fixtures.precision",
    "settings": "config.role",
    "assert_optimizer_matches": "helpers.optim",
    "Footprint": "helpers.pruning",
    "Shrinkage": "helpers.pruning",
    "UntraceableModelError": "helpers.pruning",
    "assert_shrinks": "helpers.pruning",
    "nni_speedup": "helpers.pruning",
    "prune": "helpers.pruning",
}

if TYPE_CHECKING:
    from .config.role import settings
    from .fixtures.compile import CompileBackend
    from .fixtures.precision import Precision
    from .helpers.optim import assert_optimizer_matches
    from .helpers.pruning import (
        Footprint,
        Shrinkage,
        UntraceableModelError,
        assert_shrinks,
        nni_speedup,
        prune,
    )


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        from importlib import import_module

        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
