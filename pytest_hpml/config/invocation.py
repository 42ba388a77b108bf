"""Starting pytest again: the arguments a child pytest (a rerun, a rank) is given, and the
selection of only the tests it was started for."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

# Options a rerun process must not repeat: they write files of the first process or schedule
# tests elsewhere. True: the option takes a value (as ``--opt=V`` or ``--opt V``).
_DROPPED = {
    "--basetemp": True,
    "--junitxml": True,
    "--junit-xml": True,
    "--benchmark-json": True,
    "--benchmark-save": True,
    "--benchmark-autosave": False,
    "--benchmark-histogram": False,
    "-n": True,
    "--numprocesses": True,
    "--dist": True,
    "--maxprocesses": True,
    "--lf": False,
    "--last-failed": False,
    "--ff": False,
    "--failed-first": False,
    "--nf": False,
    "--new-first": False,
    "--sw": False,
    "--stepwise": False,
}


def child_args(config: pytest.Config) -> list[str]:
    """The first process's arguments, without those that would clash with it."""
    args = [str(a) for a in config.invocation_params.args]
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        short = arg[:2] if arg.startswith("-n") and not arg.startswith("--") else name
        if short in _DROPPED:
            skip = _DROPPED[short] and "=" not in arg and len(arg) == len(short)
            continue
        kept.append(arg)
    if config.pluginmanager.hasplugin("xdist"):
        kept.append("-n0")  # an ini addopts "-n auto" would spread the reruns
    return kept


def keep_only(config: pytest.Config, items: list[pytest.Item], tests: set[str]) -> None:
    """Deselect every collected test whose node id is not in ``tests``."""
    dropped = [item for item in items if item.nodeid not in tests]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid in tests]


def files_of(tests: Collection[str]) -> set[str]:
    """The files that hold ``tests`` (node ids), as their ids name them."""
    return {test.split("::", 1)[0] for test in tests}


def holds_none(collection_path: Path, config: pytest.Config, files: Collection[str]) -> bool | None:
    """For ``pytest_ignore_collect``: True for a file or directory that holds none of ``files``
    (:func:`files_of`), so that it is not collected; None (pytest decides) for the others."""
    try:
        where = collection_path.resolve().relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:  # outside the rootdir: its node ids do not start from there
        return None
    if where == "." or where in files:
        return None
    inside = any(file.startswith(f"{where}/") for file in files)
    return None if inside else True
