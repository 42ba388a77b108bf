"""git, run one way for the whole package: head against base, bisect and the commit lines of a
report. Each failure is a :class:`GitError` whose message says what failed; each caller words
it for its own command (a usage error, a bisect error, or no commit line)."""

from __future__ import annotations

import contextlib
import datetime
import shutil
import subprocess
from pathlib import Path

GIT_TIMEOUT = 300.0  # seconds a git command may take (a worktree of a large repository)
LINE_TIMEOUT = 10.0  # seconds for a report's commit line: a slow git leaves the line out


class GitError(Exception):
    """A git command failed, timed out or could not start."""


class Missing(GitError):
    """git is not installed here, or not on PATH."""


class Ambiguous(GitError):
    """A revision names refs of different commits; ``first`` is the one git would take."""

    def __init__(self, message: str, first: str) -> None:
        super().__init__(message)
        self.first = first


def git(top: Path, *args: str, timeout: float = GIT_TIMEOUT) -> str:
    """What ``git ARGS`` prints in ``top``; a :class:`GitError` saying what failed."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=top, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        raise Missing("git is not installed here (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)} took over {timeout:g} s") from None
    except OSError as exc:  # a directory that is gone, or no permission to run git
        raise GitError(f"git {' '.join(args)} could not start in {top}: {exc}") from None
    if done.returncode:
        said = done.stderr.strip().splitlines()
        raise GitError(
            f"git {' '.join(args)} failed in {top}: {said[-1] if said else done.returncode}"
        )
    return done.stdout


def line(top: Path, *args: str) -> str | None:
    """What ``git ARGS`` prints in ``top``, stripped; None where git fails or is missing."""
    try:
        return git(top, *args, timeout=LINE_TIMEOUT).strip()
    except GitError:
        return None


def commit(top: Path, revision: str) -> str:
    """The full sha of the commit ``revision`` names in ``top``: an :class:`Ambiguous` error
    where it names refs of different commits (git would pick one silently), a
    :class:`GitError` where it names none."""
    _check_unambiguous(top, revision)
    found = git(
        top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}"
    )
    return found.strip()


def remove_worktree(top: Path, directory: Path) -> None:
    """Remove the worktree ``directory`` of the repository ``top`` and git's record of it;
    safe to call twice, and on a worktree git never finished adding."""
    with contextlib.suppress(GitError):  # then removed below, and pruned
        git(top, "worktree", "remove", "--force", str(directory))
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(GitError):
        git(top, "worktree", "prune")


def _check_unambiguous(top: Path, revision: str) -> None:
    # the refs git tries for a name, in its order (git help revisions)
    tried = [f"refs/{revision}", f"refs/tags/{revision}", f"refs/heads/{revision}"]
    tried += [f"refs/remotes/{revision}", f"refs/remotes/{revision}/HEAD"]
    listed = git(top, "for-each-ref", "--format=%(refname) %(objectname) %(*objectname)", *tried)
    commits = {}
    for entry in listed.splitlines():
        name, _, objects = entry.partition(" ")
        if name in tried:
            commits[name] = objects.split()[-1]  # a tag's commit, not the tag object
    named = sorted(commits, key=tried.index)  # the first is the one git would take
    if len(set(commits.values())) > 1:
        raise Ambiguous(
            f"{revision} is ambiguous: {' and '.join(named)} are different commits, and git "
            f"would take {named[0]} unsaid",
            named[0],
        )


def head_commit(root: Path) -> str | None:
    """The checked-out commit (12 digits), if ``root`` is in a git repository."""
    return line(root, "rev-parse", "--short=12", "HEAD") or None


def commit_time(root: Path) -> str | None:
    """When the checked-out commit was committed (ISO 8601, UTC), if ``root`` is in a git
    repository: the order of commits in a history, whenever each was measured."""
    found = line(root, "log", "-1", "--format=%ct", "HEAD")
    if found is None or not found.isdigit():
        return None
    when = datetime.datetime.fromtimestamp(int(found), datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def changed(root: Path) -> bool | None:
    """Whether tracked files differ from the checked-out commit (None outside git): a run of
    such a tree is not the commit's."""
    found = line(root, "status", "--porcelain", "--untracked-files=no")
    return None if found is None else bool(found)
