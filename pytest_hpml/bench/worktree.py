"""The base worktree of head against base, and the checks before it is made: git run with
each failure a usage error, the revision, the rootdir inside the repository, the temporary
directory, the paths each side puts first, and the worktrees a killed run left behind."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from .. import _compat, vcs
from ..config.resolution import SETTINGS_KEY
from ..config.values import given, shown

# A base worktree's name holds its run's process id: a later run knows which ones a killed run
# left behind (SIGKILL: nothing could clean up).
WORKTREE_PREFIX = "pytest-hpml-base-"
_LEFT_BEHIND = re.compile(re.escape(WORKTREE_PREFIX) + r"(\d+)-")


def remove_left_behind(config: pytest.Config, top: Path) -> None:
    """Remove the base worktrees of ``top`` whose run no longer runs, and say so; another
    tool's worktrees, and those of a run still going, are left alone."""
    listed = git_or_usage(top, "worktree", "list", "--porcelain").splitlines()
    for path in (Path(line[len("worktree ") :]) for line in listed if line.startswith("worktree ")):
        match = _LEFT_BEHIND.match(path.name)
        if match is None or _running(int(match.group(1))):
            continue
        vcs.remove_worktree(top, path)
        with _compat.uncaptured(config):
            print(
                f"hpml: removed the base worktree {path}, which a run that ended without "
                f"cleaning up (process {match.group(1)}) left behind",
                file=sys.stderr,
                flush=True,
            )


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or no pid at all: not ours to judge
    return True


NEEDS_GIT = "--hpml-against needs git, which is not installed here (or not on PATH)"


def git_or_usage(top: Path, *args: str) -> str:
    """Run git in ``top``; a usage error saying what failed."""
    try:
        return vcs.git(top, *args)
    except vcs.Missing:
        raise pytest.UsageError(NEEDS_GIT) from None
    except vcs.GitError as exc:
        raise pytest.UsageError(str(exc)) from None


def inside(top: Path, here: Path) -> Path:
    """``here``, the invocation directory, which must lie in the repository: relative paths on
    the command line then name the same files in both trees."""
    try:
        here.resolve().relative_to(top)
    except ValueError:
        raise pytest.UsageError(
            f"--hpml-against: pytest runs from {here}, outside the repository {top}; run it "
            "from inside the repository, so that its paths name the same files in both trees"
        ) from None
    return here


def toplevel(root: Path) -> Path:
    try:
        return Path(vcs.git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    except vcs.Missing:
        raise pytest.UsageError(NEEDS_GIT) from None
    except vcs.GitError:
        raise pytest.UsageError(
            f"--hpml-against compares with a git revision, but the rootdir {root} is not in a "
            "git repository; run it in a clone, or compare with stored baselines "
            "(--hpml-baseline)"
        ) from None


def commit_of(top: Path, revision: str) -> str:
    try:
        return vcs.commit(top, revision)
    except vcs.Missing:
        raise pytest.UsageError(NEEDS_GIT) from None
    except vcs.Ambiguous as exc:
        raise pytest.UsageError(
            f"--hpml-against={exc}; name one in full (--hpml-against={exc.first})"
        ) from None
    except vcs.GitError:
        raise pytest.UsageError(
            f"--hpml-against={revision}: no such commit in {top}; name a branch, tag or sha "
            "(git rev-parse must know it: in CI, fetch the base first, e.g. "
            "actions/checkout with fetch-depth: 0)"
        ) from None


def named(config: pytest.Config, dest: str, value: Any) -> str:
    """An option's value as messages name it, with the source that gave it
    (``HPML_AGAINST_PYTHON=python3 -S``, ``ini hpml_against_paths = src``)."""
    sources = config.stash[SETTINGS_KEY].sources if SETTINGS_KEY in config.stash else {}
    source = sources.get(dest, "default")
    return given(f"--hpml-{dest.replace('_', '-')}" if source == "default" else source, value)


def check_temporary(root: Path) -> None:
    """A usage error where the temporary directory lies in the rootdir: the base worktree made
    there would be collected as the head's tests."""
    where, root = Path(tempfile.gettempdir()).resolve(), root.resolve()
    if where == root or root in where.parents:
        named = next(
            (f"{v}={os.environ[v]}" for v in ("TMPDIR", "TEMP", "TMP") if v in os.environ), ""
        )
        raise pytest.UsageError(
            f"--hpml-against: the temporary directory {where} ({named or 'the default'}) lies "
            f"in the rootdir {root}, where pytest would collect the base worktree as the head's "
            "tests; set TMPDIR to a directory outside it"
        )


def check_paths(config: pytest.Config, paths: Sequence[str]) -> tuple[str, ...]:
    """``paths`` (--hpml-against-paths), each a directory of the rootdir, which each side puts
    first on ``sys.path`` from its own tree; a usage error otherwise. A path outside the rootdir
    (absolute, or through ``..``) would be the same on both sides, one that is no directory puts
    nothing there: either way the comparison would not be what it says."""
    root = config.rootpath.resolve()
    for path in paths:
        where = (root / path).resolve()
        if where != root and root not in where.parents:
            why = f"{shown(path)} lies outside the rootdir {root}, the same for both sides"
        elif not where.is_dir():
            why = f"{shown(path)} is no directory of the rootdir {root}"
        else:
            continue
        raise pytest.UsageError(
            f"{named(config, 'against_paths', ','.join(paths))}: {why}; name directories of "
            "the rootdir, relative to it (such as src)"
        )
    return tuple(paths)
