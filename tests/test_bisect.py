"""``pytest-hpml bisect``: the first commit where a benchmark's metric changed (Note [Bisect]).

A real git repository of 30 commits: commit 11 adds a host sync to the step (``.item()``),
commit 23 doubles the step's work (twice the matrix products). Bisecting ``syncs`` must name
commit 11, exactly; bisecting ``time`` must name commit 23, judged against the first commit in
two pairs of processes at a threshold of 30%: twice the time is well clear of it, and so is a
busy machine's noise (at the default 6%, a step 20% slower was bisected to commit 15, whose
time had not changed, in one CI run of five judgments). Every pytest run is a real one in a
temporary worktree, removed at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_hpml import cli
from tests.conftest import DUMPS_STACKS, git, interrupt, interruptible

if TYPE_CHECKING:
    from tests.conftest import Project

SYNC_FROM, SLOWER_FROM, COMMITS = 11, 23, 30

STEPS = '''
"""The step a benchmark times, as it was at revision {revision}."""

import torch

torch.manual_seed(0)
x = torch.randn(96, 96)
PRODUCTS = {products}


def step():
    y = x
    for _ in range(PRODUCTS):
        y = torch.tanh(y @ x)
{sync}    return y
'''

SYNC = "    y.sum().item()  # a host sync: the host waits for the device\n"

TESTS = """
from steps import step


def test_step(benchmark):
    benchmark(step)


def test_other(benchmark):
    benchmark(sum, range(10))
"""


def history(project: Project) -> list[str]:
    """The repository of the module docstring; the commits' shas, oldest first."""
    project.pytester.makepyfile(test_bench=TESTS)
    git(project.path, "init", "-q")
    shas = []
    for revision in range(1, COMMITS + 1):
        sync = SYNC if revision >= SYNC_FROM else ""
        products = 20 if revision >= SLOWER_FROM else 10  # twice the work
        code = STEPS.format(revision=revision, products=products, sync=sync)
        (project.path / "steps.py").write_text(code)
        git(project.path, "add", "-A")
        git(project.path, "commit", "-qm", f"revision {revision}")
        shas.append(git(project.path, "rev-parse", "HEAD").strip())
    return shas


def worktrees(path: Path) -> list[str]:
    listed = git(path, "worktree", "list", "--porcelain").splitlines()
    return [line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_bisect_names_the_commit_that_added_a_host_sync(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    shas = history(project)
    code, out, err = run_cli(
        capsys, "bisect", shas[0], "HEAD", "-k", "test_step", "--metric", "syncs"
    )
    assert (code, err) == (0, ""), out
    found = out.splitlines()[-3:]
    assert found[0] == f"first commit where syncs changed: {shas[SYNC_FROM - 1]} revision 11"
    assert found[1].startswith("  syncs regressed: 0 -> 1, ")
    assert found[1].endswith(
        "item: 0 -> 1 per call; where: aten::_local_scalar_dense at steps.py:15 (new)"
    )
    assert found[2].startswith(f"bisect: {COMMITS - 1} commits searched in ")
    assert worktrees(project.path) == [str(project.path)]

    # commit 10 changed no sync: exit status 1
    before = shas[SYNC_FROM - 3 : SYNC_FROM - 1]
    code, out, _ = run_cli(capsys, "bisect", *before, "-k", "test_step", "--metric", "syncs")
    assert code == 1
    assert out.splitlines()[-1].startswith(f"bisect: syncs at {shas[SYNC_FROM - 2]} is as at ")


def test_bisect_names_the_commit_that_made_the_step_slower(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """The long one (about 30 s on 2 cores): 5 judgments against the first commit, each in 3
    short pairs of processes; with 2, one process 15% slower than the other of its side left
    a 2x step inconclusive."""
    shas = history(project)
    pytest_args = ["--", "--hpml-bench-time=0.3", "--hpml-pairs=3", "--hpml-threshold=30%"]
    code, out, err = run_cli(capsys, "bisect", shas[0], "HEAD", "-k", "test_step", *pytest_args)
    assert (code, err) == (0, ""), out
    found = out.splitlines()[-3:]
    assert found[0] == f"first commit where time changed: {shas[SLOWER_FROM - 1]} revision 23"
    assert found[1].startswith("  time regressed: ")
    assert worktrees(project.path) == [str(project.path)]


@pytest.mark.parametrize(
    ("good", "bad", "said"),
    [
        ("nosuch", "HEAD", "'nosuch' is no commit of "),
        ("HEAD", "HEAD~3", "HEAD is not an ancestor of HEAD~3: name the older, good commit first"),
        ("HEAD", "HEAD", "HEAD and HEAD are the same commit"),
    ],
)
def test_a_bad_revision_is_one_line(
    good: str, bad: str, said: str, project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    project.pytester.makepyfile(steps="x = 1\n")
    git(project.path, "init", "-q")
    for revision in range(4):
        git(project.path, "commit", "-q", "--allow-empty", "-m", f"revision {revision}")
    code, out, err = run_cli(capsys, "bisect", good, bad, "-k", "test_step")
    assert (code, out) == (2, "")
    assert err.startswith(f"pytest-hpml: error: {said}")
    assert err.count("\n") == 1


def test_an_ambiguous_revision_is_one_line_naming_both(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tag and a branch both named x, at different commits: git takes the tag unsaid; the
    command said x was no commit."""
    project.pytester.makepyfile(steps="x = 1\n")
    git(project.path, "init", "-q")
    for revision in range(4):
        git(project.path, "commit", "-q", "--allow-empty", "-m", f"revision {revision}")
    git(project.path, "tag", "x", "HEAD~3")
    git(project.path, "branch", "x", "HEAD~2")
    code, out, err = run_cli(capsys, "bisect", "x", "HEAD", "-k", "test_step")
    assert (code, out) == (2, "")
    assert err == (
        "pytest-hpml: error: x is ambiguous: refs/tags/x and refs/heads/x are different commits, "
        "and git would take refs/tags/x unsaid; name one in full (refs/tags/x)\n"
    )


@pytest.mark.parametrize(
    ("selected", "metric", "said"),
    [
        ("test_", "syncs", "-k 'test_' measured 2 benchmarks (test_bench.py::test_step, "),
        ("test_step", "copies[x]", "test_bench.py::test_step records no metric 'copies[x]'; "),
    ],
)
def test_a_selection_of_no_one_metric_is_one_line(
    selected: str, metric: str, said: str, project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    shas = history(project)
    code, out, err = run_cli(capsys, "bisect", shas[0], "HEAD", "-k", selected, "--metric", metric)
    assert (code, out) == (2, "")
    assert err.startswith(f"pytest-hpml: error: at {shas[0][:12]} (revision 1): {said}")
    assert err.count("\n") == 1
    assert worktrees(project.path) == [str(project.path)]


def test_ctrl_c_removes_the_worktree(project: Project) -> None:
    shas = history(project)
    command = [sys.executable, "-m", "pytest_hpml", "bisect", shas[0], "HEAD", "-k", "test_step"]
    started = subprocess.Popen(
        [*command, "--metric", "syncs"],
        cwd=project.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **DUMPS_STACKS},
        preexec_fn=interruptible,
    )
    deadline = time.monotonic() + 120
    while len(worktrees(project.path)) < 2 and started.poll() is None:
        assert time.monotonic() < deadline, "no worktree made in 2 minutes"
        time.sleep(0.2)
    (made,) = set(worktrees(project.path)) - {str(project.path)}
    time.sleep(1.0)  # a pytest run under way in it
    _, err = interrupt(started, 120)
    assert started.returncode == 130, err
    assert err == "pytest-hpml: bisect interrupted; its worktree is removed\n"
    assert worktrees(project.path) == [str(project.path)]
    assert not Path(made).exists()
