"""``python -m pytest_hpml``: the same as the ``pytest-hpml`` command."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
