"""pytest-hpml: a pytest plugin and performance-regression suite for PyTorch training.

Importing the package stays cheap (no torch): the plugin loads into every pytest run.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["CompileBackend", "Precision", "__version__"]

from .compile import CompileBackend
from .precision import Precision
