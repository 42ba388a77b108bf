"""Quieting the libraries pytest-hpml drives (torch's elastic launcher, NNI), which log at INFO
what a test run need not show."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quieted(name: str) -> Iterator[None]:
    """Only errors from the logger ``name`` (and its children) inside; its level put back."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
