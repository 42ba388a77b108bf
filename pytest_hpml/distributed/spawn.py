"""A ``@pytest.mark.distributed`` test run in ranks of its own, spawned by the pytest process
that collected it.

The parent hosts a ``TCPStore`` on a free port, as torchrun's agent does, and starts
``world_size`` fresh ``python -m pytest`` processes one by one (:mod:`.processes`). Each rank
runs that one test, with ``torch.distributed`` initialized from the usual environment
(``RANK``, ``WORLD_SIZE``, ``MASTER_PORT``...), and writes its test reports to a JSON file
(:mod:`.rank`). The parent watches the ranks: the first rank that fails or dies, or the test's
timeout, ends the test; ranks still running are asked for their stacks, then killed with their
process groups. The ranks' reports are merged into one per phase (:mod:`.reports`).

The timeout counts from the start of the launch: a deadline that passes while ranks are still
being started stops the starting. A test asking for more ranks than
:func:`~.spec.rank_limit` fails at its setup, before any starts. Ctrl-C stops the ranks and
removes their directory, and pytest ends as it does on Ctrl-C (torch's own launcher would turn
SIGINT into an exception of its own for the rest of the run); ranks die with a parent killed
outright (leaving the directory).

A test needing more GPUs than its xdist worker holds runs the same way on GPUs leased for it
(:mod:`.leases`): a distributed test in its ranks, another test in one process of its own.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import pytest

from .. import _compat
from ..config.invocation import child_args
from ..config.role import RANK_BENCH_TIME_ENV, RERUN_ENV, launch
from ..hardware import gpus
from .processes import Ranks, watch
from .reports import failed, merge, skipped
from .spec import (
    BACKEND_ENV,
    GROUP_ENV,
    PARENT_ENV,
    RESULT_ENV,
    STACKS_ENV,
    TEST_ENV,
    TIMEOUT_ENV,
    Spec,
    gpus_needed,
    skip_reason,
    spec,
    too_many_ranks,
)


def spawn_protocol(
    item: pytest.Item,
    nextitem: pytest.Item | None,
    budget: Callable[[str], float],
    forker: Callable[[], Any] = lambda: None,
) -> bool | None:
    """Run a distributed test in ranks of its own, or a test needing more GPUs than this xdist
    worker has in a process of its own on leased GPUs, and log the merged reports; None for
    the other tests, and in a process that is a rank already.

    ``budget(test id)``: the seconds of rounds a benchmark gets in one process, which the
    ranks are told; ``forker()``: what forks the ranks, or None (a fresh process each); both
    passed in by the plugin: the bench layer decides them."""
    if launch(item.config) is not None:
        return None
    asked = spec(item)
    share = gpus.share(item.config)
    need = gpus_needed(item, asked)
    leased = share is not None and need > len(share.mine)
    if asked is None and not leased:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reason = skip_reason(item, asked) if asked else None
    refused = too_many_ranks(item, asked) if asked and not reason else None
    if reason:
        reports = skipped(item, reason)
    elif refused:
        reports = failed(item, refused)
    elif leased and need > len(share.every):  # type: ignore[union-attr]
        reports = skipped(item, f"needs {need} GPUs, found {len(share.every)}")  # type: ignore[union-attr]
    elif leased:
        with share.lease(need) as chosen:  # type: ignore[union-attr]
            apart = asked or Spec(1, "gloo", math.inf)
            reports = run_spawned(item, apart, budget, chosen, group=asked is not None)
    else:
        reports = run_spawned(item, asked, budget, forker=forker())  # type: ignore[arg-type]
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    _tear_down_before(item, nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _tear_down_before(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """What this process set up for earlier tests (module, class fixtures) and ``nextitem``
    does not need is torn down here, as pytest's own protocol does after each test."""
    # pytest_runtest_teardown would also read what setup left in the item's stash, and this
    # process never set the item up: only its setup state is unwound.
    call = pytest.CallInfo.from_call(lambda: _compat.teardown_exact(item, nextitem), "teardown")
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)


def run_spawned(
    item: pytest.Item,
    asked: Spec,
    budget: Callable[[str], float],
    visible: Sequence[str] | None = None,
    group: bool = True,
    forker: Any = None,
) -> list[pytest.TestReport]:
    """Run ``item`` in ``asked.world_size`` fresh ranks and merge what they reported.

    ``visible``: the GPUs the ranks may see (leased ones); ``group``: whether they form a
    process group (not for a plain test run apart on leased GPUs); ``forker``: a fork server
    that forks them (``processes.Ranks``). However this ends (Ctrl-C included), no rank is
    left running and the ranks' directory is removed.
    """
    from torch.distributed import TCPStore

    deadline = time.monotonic() + asked.timeout  # starting the ranks is part of the test
    ranks = Ranks(Path(tempfile.mkdtemp(prefix="pytest-hpml-ranks-")), forker)
    try:
        store = TCPStore("127.0.0.1", 0, asked.world_size, True, wait_for_workers=False)
        bench_time = budget(item.nodeid)
        for rank in range(asked.world_size):
            if time.monotonic() > deadline:
                return failed(item, _late(asked, rank))
            env = _rank_env(item, asked, rank, store.port, ranks.workdir, bench_time)
            if visible is not None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
            env[GROUP_ENV] = "1" if group else "0"
            ranks.start(rank, _rank_args(item.config, ranks.workdir, rank), env)
        return merge(item, watch(item, ranks, asked, deadline))
    finally:
        ranks.close()
        shutil.rmtree(ranks.workdir, ignore_errors=True)


def _late(asked: Spec, started: int) -> str:
    return (
        f"timed out after {asked.timeout:g} s while starting the ranks ({started} of "
        f"{asked.world_size} started); those started were stopped"
    )


def _rank_env(
    item: pytest.Item, asked: Spec, rank: int, port: int, workdir: Path, bench_time: float
) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(asked.world_size),
        "LOCAL_WORLD_SIZE": str(asked.world_size),
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        # The ranks rendezvous on the parent's store, as torchrun's workers do on the agent's.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_RUN_ID": f"hpml-{os.getpid()}",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        RESULT_ENV: str(workdir / f"rank{rank}.json"),
        STACKS_ENV: str(workdir / f"rank{rank}-stacks.txt"),
        TEST_ENV: item.nodeid,
        BACKEND_ENV: asked.backend,
        TIMEOUT_ENV: str(asked.timeout) if math.isfinite(asked.timeout) else "",
        PARENT_ENV: str(os.getpid()),
        RERUN_ENV: "",  # a rank measures in its own process only
        RANK_BENCH_TIME_ENV: str(bench_time),
    }


def _rank_args(config: pytest.Config, workdir: Path, rank: int) -> tuple[str, ...]:
    return (
        "-m",
        "pytest",
        *child_args(config),
        "-p",
        "no:cacheprovider",
        f"--basetemp={workdir / f'rank{rank}' / 'tmp'}",
        "--hpml-processes=1",
    )
