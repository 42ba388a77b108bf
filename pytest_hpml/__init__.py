"""pytest-hpml: a pytest plugin and performance-regression suite for PyTorch training.

Importing the package stays cheap (no torch, nothing but what pytest loads): the plugin loads
into every pytest run. Public names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["CompileBackend", "Precision", "__version__", "assert_optimizer_matches"]

_PUBLIC = {
    "CompileBackend": "compile",
    "Precision": "precision",
    "assert_optimizer_matches": "optim",
}

if TYPE_CHECKING:
    from .compile import CompileBackend
    from .optim import assert_optimizer_matches
    from .precision import Precision


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        from importlib import import_module

        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
