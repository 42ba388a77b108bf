"""The one reader of pytest-hpml's JSON files (baselines, reports, the requests and answers of
its own processes): every file is untrusted input (Note [Files]).

A file that cannot be used raises :class:`Unreadable`, whose message names the file and what is
wrong with it, down to the byte or the line; what the document means is checked by its owner,
which names the path of a bad field (:func:`at`).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

# Larger than any baseline or report pytest-hpml writes (a baseline of 10,000 benchmarks with
# six process runs each is about 250 MB), and small enough to read into memory on a CI runner.
MAX_BYTES = 1 << 30
# pytest-hpml's own documents nest about eight levels deep; json itself recurses, so a file
# nested thousands deep would end in a RecursionError far from the file's name.
MAX_DEPTH = 64


class Unreadable(Exception):
    """A file that cannot be read as what it should be; the message names the file."""


def read_json(path: Path, what: str) -> Any:
    """The JSON document in ``path``. ``what`` names it in messages ("baseline file", "report").
    A missing file raises FileNotFoundError (the caller decides what that means); anything else
    wrong, :class:`Unreadable`."""
    text = read_text(path, what)
    try:
        document = json.loads(text, object_pairs_hook=_once_each)
    except _Twice as twice:
        raise Unreadable(f"{what} {path} gives the key {twice.key!r} twice in one object") from None
    except RecursionError:
        raise Unreadable(f"{what} {path} is nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise Unreadable(
            f"{what} {path} is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
        ) from None
    except ValueError:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        raise Unreadable(
            f"{what} {path} holds an integer of more than {sys.get_int_max_str_digits():,} "
            "digits, more than any measurement"
        ) from None
    if _deeper_than(document, MAX_DEPTH):
        raise Unreadable(f"{what} {path} is nested deeper than {MAX_DEPTH} levels")
    return document


class _Twice(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the document, refused where a key comes twice: json would keep the last
    copy, and which one a reader meant is not known."""
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Twice(key)
            seen.add(key)
    return found


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``: a regular file of at most MAX_BYTES."""
    try:
        # not blocking: a FIFO would wait for a writer forever; what it is is checked first
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(path)
            if not stat.S_ISREG(info.st_mode):
                raise Unreadable(f"{what} {path} is not a regular file")
            if info.st_size > MAX_BYTES:
                raise Unreadable(
                    f"{what} {path} is {info.st_size:,} bytes, more than the {MAX_BYTES:,} "
                    "pytest-hpml reads"
                )
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise Unreadable(f"{what} {path} is a directory") from None
    except OSError as exc:
        raise Unreadable(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise Unreadable(
            f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start:,}, line {line})"
        ) from None


def _deeper_than(document: Any, limit: int) -> bool:
    """Whether ``document`` nests containers more than ``limit`` levels (without recursion)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return False


def at(*keys: Any) -> str:
    """The path of a field in a document, every key after the first in brackets, as Python and
    jq write it: ``entries["t::x"]["time"]["samples"][3]`` (a test id or metric name may hold
    dots and spaces: brackets keep the path unambiguous)."""
    first, *rest = keys
    return str(first) + "".join(f"[{json.dumps(k, ensure_ascii=True)}]" for k in rest)
