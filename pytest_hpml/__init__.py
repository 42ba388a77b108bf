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
]

_PUBLIC = {
    "CompileBackend": "compile",
    "Precision": "precision",
    "assert_optimizer_matches": "optim",
    "Footprint": "pruning",
    "Shrinkage": "pruning",
    "UntraceableModelError": "pruning",
    "assert_shrinks": "pruning",
    "nni_speedup": "pruning",
    "prune": "pruning",
}

if TYPE_CHECKING:
    from .compile import CompileBackend
    from .optim import assert_optimizer_matches
    from .precision import Precision
    from .pruning import (
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
