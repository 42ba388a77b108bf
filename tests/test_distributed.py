"""@pytest.mark.distributed: tests run in real ranks (gloo on CPU), and every way a rank can
fail, hang, die or disagree ends that test only, promptly, with the rank's story told.

The inner runs start real rank processes, so they run in a fresh interpreter
(``runpytest_subprocess``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from pytest_hpml.config.role import MAX_RANK, BadLaunch, Launch, launch_from, launch_problem
from tests.conftest import interrupt
from tests.test_processes import hpml_files, start_pytest, still_running, wait_for_pid

if TYPE_CHECKING:
    from tests.conftest import Project

RANKS = """
import os
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.distributed(world_size=2)
def test_ranks_sum(rank, world_size, device, dist_backend, tmp_path, record):
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    (tmp_path / "mine.txt").write_text(str(rank))
    record(rank=rank, world_size=world_size, total=total.item(), device=str(device),
           backend=dist_backend, pid=os.getpid())
    print(f"hello from rank {rank}")
"""


def _project(project: Project, source: str) -> Project:
    project.write_tests(source)
    return project


def _ranks_left(marker: str) -> list[int]:
    """Processes still alive whose environment names ``marker`` (a test's file)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"HPML_RANK_TEST=" in environ and marker.encode() in environ:
            alive.append(int(entry.name))
    return alive


def _fails_alone(project: Project, source: str) -> str:
    """Run ``source`` (one failing distributed test) with a plain test after it: the failing
    test fails, the plain one still passes. Returns the output.

    Whether a failure ended the test promptly is read from why the other rank was stopped, not
    from a wall time: a busy machine may take any time."""
    _project(project, source + "\n\ndef test_after():\n    pass\n")
    result = project.run_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    return result.stdout.str()


def test_each_rank_runs_the_test_with_the_process_group_up(project: Project) -> None:
    _project(project, RANKS)
    result = project.run_subprocess("-v")
    result.assert_outcomes(passed=1)
    records = sorted(project.records(), key=lambda r: r["rank"])
    assert [r["rank"] for r in records] == [0, 1]
    assert {r["world_size"] for r in records} == {2}
    assert {r["total"] for r in records} == {3.0}  # 1 + 2: the all_reduce went through
    assert {r["backend"] for r in records} == {"gloo"}
    assert {r["device"] for r in records} == {"cpu"}
    assert len({r["pid"] for r in records}) == 2
    assert os.getpid() not in {r["pid"] for r in records}


# A test module that notes which processes imported it.
IMPORTED = """
import os
from pathlib import Path

with open(Path(__file__).with_name("imported.txt"), "a") as out:
    out.write(f"{os.getpid()} {__name__}\\n")


def test_plain():
    pass
"""


def test_a_spawned_rank_collects_only_the_file_of_its_test_and_ends_before_its_summary(
    project: Project,
) -> None:
    """The other test modules, beside it and in other directories, are imported by the
    process that spawned the ranks only; and only that process runs its terminal summary
    (Note [Cheaper processes])."""
    _project(project, RANKS)
    project.pytester.makepyfile(test_beside=IMPORTED)
    (project.path / "deeper").mkdir()
    (project.path / "deeper" / "test_deeper.py").write_text(IMPORTED)
    result = project.run_subprocess()
    result.assert_outcomes(passed=3)
    assert len({r["pid"] for r in project.records()}) == 2  # the ranks ran
    for imported in (project.path / "imported.txt", project.path / "deeper" / "imported.txt"):
        assert len(imported.read_text().splitlines()) == 1, imported.read_text()
    assert len((project.path / "summaries.txt").read_text().split()) == 1


# A distributed test whose ranks note, in a file of their own, that their exit handlers ran.
ENDS = """
import atexit
import os

import pytest
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))


def said(what, rank, open=open, join=os.path.join):  # kept: a teardown may remove the names
    with open(join(HERE, f"ends{rank}.txt"), "a") as out:
        out.write(what + "\\n")


@pytest.mark.distributed(world_size=2)
def test_ends(rank):
    atexit.register(said, "exit-handler", rank)
    dist.barrier()
"""
# Imported as every interpreter of the run starts (on PYTHONPATH, which pytester sets to the
# project): an exit handler registered before pytest runs, hence the last to run, which an
# interpreter that ends as Python does runs and one that skips its teardown does not.
LAST_HANDLER = """
import atexit
import os


def last(rank=os.environ.get("RANK", "controller"), open=open):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "last.txt"), "a") as out:
        out.write(rank + "\\n")


atexit.register(last)
"""


def test_a_spawned_rank_runs_every_exit_handler_and_skips_the_teardown(
    project: Project,
) -> None:
    """Once its reports are written, a spawned rank ends as a measuring process does: the
    exit handlers registered once pytest runs (the test's own too) run, and then it ends
    without tearing its interpreter down (Note [Cheaper processes])."""
    _project(project, ENDS)
    project.pytester.makepyfile(sitecustomize=LAST_HANDLER)
    result = project.run_subprocess()
    result.assert_outcomes(passed=1)
    for rank in (0, 1):
        assert (project.path / f"ends{rank}.txt").read_text().split() == ["exit-handler"]
    assert (project.path / "last.txt").read_text().split() == ["controller"]


def test_a_rank_that_raises_fails_the_test_promptly_with_its_traceback(project: Project) -> None:
    out = _fails_alone(
        project,
        """
import pytest
import torch.distributed as dist


@pytest.mark.distributed(world_size=2, timeout=120)
def test_rank1_raises(rank):
    if rank == 1:
        raise ValueError("boom from rank 1")
    dist.barrier()  # rank 0 waits here for a rank that is gone
""",
    )
    assert "rank 1 failed" in out
    assert "ValueError: boom from rank 1" in out
    assert 'raise ValueError("boom from rank 1")' in out  # the full traceback, source shown
    # rank 0, waiting in the barrier, failed or was stopped with rank 1, not at the timeout
    assert "timed out" not in out


def test_a_rank_that_hangs_fails_at_the_timeout_with_its_stack(project: Project) -> None:
    out = _fails_alone(
        project,
        """
import time

import pytest
import torch.distributed as dist


def wait_forever():
    time.sleep(3600)


@pytest.mark.distributed(world_size=2, timeout=8)
def test_rank0_hangs(rank):
    if rank == 0:
        wait_forever()
    dist.barrier()
""",
    )
    assert "rank 0 did not finish call: timed out after 8 s" in out
    assert "in wait_forever" in out  # rank 0's stack, from faulthandler
    assert _ranks_left(str(project.path)) == []


@pytest.mark.parametrize(
    ("death", "said"),
    [
        ("os._exit(3)", "exit code 3"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
        ("ctypes.string_at(0)", "SIGSEGV"),
    ],
    ids=["exit", "sigkill", "segfault"],
)
def test_a_rank_that_dies_fails_the_test_with_its_exit(
    project: Project, death: str, said: str
) -> None:
    out = _fails_alone(
        project,
        f"""
import ctypes
import os
import signal

import pytest
import torch.distributed as dist


@pytest.mark.distributed(world_size=2, timeout=120)
def test_rank1_dies(rank):
    if rank == 1:
        {death}
    dist.barrier()
""",
    )
    assert "rank 1 did not finish call" in out
    assert said in out
    assert "timed out" not in out  # ended by rank 1's death, not by the timeout
    assert _ranks_left(str(project.path)) == []


def test_ranks_that_all_skip_make_a_skip_and_disagreeing_ranks_a_failure(
    project: Project,
) -> None:
    _project(
        project,
        """
import pytest


@pytest.mark.distributed(world_size=2)
def test_all_skip(rank):
    pytest.skip("not today")


@pytest.mark.distributed(world_size=2)
def test_one_skips(rank):
    if rank == 1:
        pytest.skip("rank 1 would rather not")
""",
    )
    result = project.run_subprocess("-rs")
    result.assert_outcomes(skipped=1, failed=1)
    out = result.stdout.str()
    assert "not today" in out
    assert "the ranks disagree: rank 0 passed, rank 1 skipped (rank 1 would rather not)" in out


def test_nccl_without_enough_gpus_is_a_skip_saying_so(project: Project) -> None:
    _project(
        project,
        """
import pytest


@pytest.mark.distributed(world_size=2, backend="nccl")
def test_nccl(rank):
    pass
""",
    )
    result = project.run_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*nccl with world_size=2 needs 2 GPUs (one per rank), found 0*"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ("world_size=0", "world_size must be a positive integer, got 0"),
        ("backend='nccc'", "unknown backend 'nccc'; choose from gloo, nccl, mpi"),
        ("timeout=-1", "timeout must be a positive number of seconds, got -1"),
        ("2, 'gloo', 5, 6", "too many positional arguments"),
    ],
)
def test_wrong_marker_arguments_fail_the_test_in_place_without_spawning_ranks(
    project: Project, args: str, said: str
) -> None:
    source = f"import pytest\n\n\n@pytest.mark.distributed({args})\ndef test_x():\n    pass\n"
    _project(project, source)
    result = project.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*test_inner.py::test_x: wrong @pytest.mark.distributed: {said}*"]
    )
    assert "rank 0" not in result.stdout.str()  # no rank was started for it


def test_the_rank_fixture_outside_a_distributed_test_says_what_is_missing(
    project: Project,
) -> None:
    _project(project, "def test_x(rank):\n    pass\n")
    result = project.run()
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*the rank fixture needs @pytest.mark.distributed*"])


def test_two_distributed_tests_at_once_under_xdist_do_not_collide(project: Project) -> None:
    pytest.importorskip("xdist")
    source = RANKS + RANKS.split("\n\n\n", 1)[1].replace("test_ranks_sum", "test_again")
    _project(project, source)
    result = project.run_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
    assert len(project.records()) == 4


def test_ranks_die_with_a_pytest_killed_from_outside(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _project(
        project,
        """
import time

import pytest


@pytest.mark.distributed(world_size=2)
def test_slow(rank):
    time.sleep(3600)
""",
    )
    # The rank directory this leaves behind goes to a directory of the test's own.
    inner = start_pytest(project, tmp_path_factory.mktemp("tmpdir"))
    marker = str(project.path)
    deadline = time.monotonic() + 60
    while len(_ranks_left(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    # at least two: a process a rank starts for a moment inherits its environment (one CI
    # run saw three)
    assert len(_ranks_left(marker)) >= 2, "the ranks never started"
    inner.send_signal(signal.SIGKILL)
    inner.communicate()
    deadline = time.monotonic() + 10
    while _ranks_left(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ranks_left(marker) == []


def test_ctrl_c_in_a_distributed_test_stops_the_ranks_as_pytest_stops(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _project(
        project,
        f"""
import os
import time
from pathlib import Path

import pytest


@pytest.mark.distributed(world_size=2)
def test_waits(rank):
    Path({str(project.path)!r}, f"rank{{rank}}.pid").write_text(str(os.getpid()))
    time.sleep(600)
""",
    )
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    inner = start_pytest(project, tmpdir)
    ranks = [wait_for_pid(inner, project.path / f"rank{rank}.pid") for rank in (0, 1)]
    out = interrupt(inner)[0]
    assert still_running(ranks) == []
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out
    assert "INTERNALERROR" not in out, out
    assert hpml_files(tmpdir) == []  # the rank directory


def _no_rank_was_left(project: Project, tmpdir: Path) -> None:
    assert _ranks_left(str(project.path)) == []
    assert hpml_files(tmpdir) == []


@pytest.fixture
def tmpdir_of_runs(project: Project, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of the inner runs (``runpytest_subprocess``), to look into."""
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    project.monkeypatch.setenv("TMPDIR", str(tmpdir))
    return tmpdir


def test_a_world_size_beyond_what_the_machine_runs_fails_at_setup_saying_how_to_raise_it(
    project: Project, tmpdir_of_runs: Path
) -> None:
    _project(
        project,
        "import pytest\n\n\n@pytest.mark.distributed(world_size=10**6)\ndef test_huge(rank):\n"
        "    pass\n\n\ndef test_after():\n    pass\n",
    )
    result = project.run_subprocess()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_inner.py::test_huge: world_size=1000000 is more ranks than this machine runs "
            "at once: at most * (4 per usable CPU: *); raise the limit with --hpml-max-ranks=N "
            "(env HPML_MAX_RANKS, ini hpml_max_ranks)*"
        ]
    )
    _no_rank_was_left(project, tmpdir_of_runs)


def test_a_rank_limit_that_was_set_is_named_when_it_refuses_a_test(
    project: Project, tmpdir_of_runs: Path
) -> None:
    _project(project, RANKS.replace("world_size=2", "world_size=3"))
    project.monkeypatch.setenv("HPML_MAX_RANKS", "2")
    result = project.run_subprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*world_size=3 is more ranks than this machine runs at once: at most 2 (HPML_MAX_RANKS)*"]
    )
    _no_rank_was_left(project, tmpdir_of_runs)


@pytest.mark.parametrize("value", ["0", "-1", "many", "2.5"])
def test_a_rank_limit_that_is_no_positive_number_is_a_usage_error(
    project: Project, value: str
) -> None:
    _project(project, "def test_x():\n    pass\n")
    result = project.run(f"--hpml-max-ranks={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hpml-max-ranks*expected auto or a positive number of ranks*"])


def test_the_timeout_covers_starting_the_ranks(project: Project, tmpdir_of_runs: Path) -> None:
    _project(
        project,
        """
import pytest


@pytest.mark.distributed(world_size=64, timeout=0.02)
def test_slow_to_start(rank):
    pass
""",
    )
    project.monkeypatch.setenv("HPML_MAX_RANKS", "64")
    result = project.run_subprocess()
    result.assert_outcomes(errors=1)
    # No machine starts 64 Python processes in 20 ms: the deadline passed while the ranks were
    # being started (how many had started depends on the machine), and those were stopped.
    result.stdout.fnmatch_lines(
        ["*timed out after 0.02 s while starting the ranks (* of 64 started)*"]
    )
    _no_rank_was_left(project, tmpdir_of_runs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_launched_by_two_torchrun_nodes_the_tests_run_in_place(project: Project) -> None:
    _project(
        project,
        RANKS
        + """

@pytest.mark.distributed(world_size=2)
def test_rank1_fails(rank):
    assert rank == 0, "rank 1 disagrees"


@pytest.mark.distributed(world_size=4)
def test_needs_four(rank):
    pass


def test_everywhere(record):
    record(plain=True)
""",
    )
    port = _free_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                f"--node-rank={node}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-rs",
            ],
            cwd=project.path,
            env={**os.environ, "HPML_PROCESSES": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outs = [node.communicate(timeout=240)[0] for node in nodes]
    rank0 = outs[0]
    assert "1 failed, 2 passed, 1 skipped" in rank0, rank0
    assert "rank 1 failed" in rank0
    assert "rank 1 disagrees" in rank0
    assert "needs world_size=4; this torchrun launch has 2 ranks" in rank0
    assert "passed" not in outs[1]  # rank 1 reports nothing of its own
    records = project.records()
    assert sorted(r["rank"] for r in records if "rank" in r) == [0, 1]
    assert sum(1 for r in records if r.get("plain")) == 2  # plain tests run on every rank


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, Launch(1, 2, 0, "torchrun")),
        (
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            },
            Launch(3, 4, 1, "mpirun"),
        ),
        ({"SLURM_PROCID": "2", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2"}, Launch(2, 8, 2, "srun")),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}, None),
        ({"RANK": "0"}, None),
        ({"RANK": "", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, None),  # an empty one is unset
        ({}, None),
        # Kubeflow's PyTorchJob sets no LOCAL_RANK: one rank per machine (pod), local rank 0
        ({"RANK": "3", "WORLD_SIZE": "4"}, Launch(3, 4, 0, "torchrun", local_given=False)),
    ],
    ids=["torchrun", "mpirun", "srun", "srun-one-task", "partial", "empty", "none", "kubeflow"],
)
def test_launchers_are_recognized_from_their_environment(
    environ: dict[str, str], expected: Launch | None
) -> None:
    assert launch_from(environ) == expected


TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
RENDEZVOUS = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
OMPI = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({**TORCHRUN, "RANK": "-1"}, "RANK='-1' is no number from 0 to"),
        ({**TORCHRUN, "RANK": "zero"}, "RANK='zero' is no number"),
        ({**TORCHRUN, "RANK": " 0 "}, "RANK=' 0 ' is no number"),  # int() would take it
        ({**TORCHRUN, "LOCAL_RANK": "\u0661"}, "LOCAL_RANK='\u0661' is no number"),
        # more digits than int() reads (4300): once an INTERNALERROR
        ({**TORCHRUN, "WORLD_SIZE": "9" * 5000}, f"WORLD_SIZE='{'9' * 60}'... (5000 characters)"),
        ({**TORCHRUN, "WORLD_SIZE": str(MAX_RANK + 1)}, f"is no number from 0 to {MAX_RANK} "),
        ({**OMPI, "OMPI_COMM_WORLD_SIZE": "x"}, "OMPI_COMM_WORLD_SIZE='x' is no number"),
    ],
    ids=["negative", "word", "spaces", "arabic-digit", "digits", "beyond-int", "mpirun-size"],
)
def test_a_rank_variable_that_is_no_number_is_named(environ: dict[str, str], said: str) -> None:
    """Such a variable once made the run no launch without a word, and its rank fixture failed
    with "needs @pytest.mark.distributed"."""
    with pytest.raises(BadLaunch) as refused:
        launch_from({**environ, **RENDEZVOUS})
    assert said in refused.value.why
    assert "in ASCII digits" in refused.value.why
    assert len(refused.value.why) < 200


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({**TORCHRUN, **RENDEZVOUS}, None),
        ({**TORCHRUN, **RENDEZVOUS, "TORCHELASTIC_RUN_ID": "none"}, None),
        (
            TORCHRUN,
            "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 are set, but MASTER_ADDR and MASTER_PORT not: no "
            "launcher started this pytest",
        ),
        ({**TORCHRUN, "MASTER_ADDR": "h"}, "are set, but MASTER_PORT not"),
        ({**TORCHRUN, **RENDEZVOUS, "MASTER_PORT": "0"}, "MASTER_PORT is no port number"),
        (
            {**TORCHRUN, **RENDEZVOUS, "MASTER_PORT": "9" * 5000},
            f"MASTER_PORT='{'9' * 60}'... (5000 characters): MASTER_PORT is no port number",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2"},
            "RANK=0 WORLD_SIZE=2 are set, but MASTER_ADDR and MASTER_PORT not",
        ),
        ({"RANK": "1", "WORLD_SIZE": "2", **RENDEZVOUS}, None),  # Kubeflow's PyTorchJob
        ({**TORCHRUN, **RENDEZVOUS, "RANK": "2"}, "RANK and LOCAL_RANK must be below WORLD_SIZE"),
        (
            {"SLURM_PROCID": "4", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"},
            "SLURM_PROCID=4 SLURM_NTASKS=4 SLURM_LOCALID=0: SLURM_PROCID and SLURM_LOCALID must "
            "be below SLURM_NTASKS",
        ),
        # srun and mpirun set no rendezvous address: rank 0's host and a fixed port are used
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}, None),
        ({**TORCHRUN, "HPML_RANK_RESULT": "/r.json"}, None),  # a rank pytest-hpml spawned
    ],
    ids=[
        "torchrun",
        "torchrun-elastic",
        "no-rendezvous",
        "no-port",
        "port-zero",
        "port-of-many-digits",
        "no-local-rank-no-rendezvous",
        "no-local-rank",
        "rank-beyond",
        "srun-rank-beyond",
        "srun",
        "spawned",
    ],
)
def test_rank_variables_that_no_launcher_set_are_told_apart(
    environ: dict[str, str], said: str | None
) -> None:
    here = launch_from(environ)
    assert here is not None
    problem = launch_problem(environ, here)
    if said is None:
        assert problem is None
    else:
        assert said in (problem or "")


def test_rank_variables_left_in_the_shell_are_a_usage_error_at_once(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once, rank 0 of such a "launch" waited 300 s for a rank 1 that never came, then raised
    DistStoreError. The timeout given is a safety net: the run must end long before it."""
    _project(project, RANKS)
    for name, value in {**TORCHRUN, "MASTER_ADDR": "", "MASTER_PORT": ""}.items():
        monkeypatch.setenv(name, value)
    start = time.monotonic()
    result = project.run_subprocess("--hpml-dist-timeout=60")
    assert time.monotonic() - start < 60
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: hpml: RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 are set, but MASTER_ADDR and "
            "MASTER_PORT not: no launcher started this pytest *. Unset RANK, WORLD_SIZE, "
            "LOCAL_RANK to run the tests in this process *"
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_launch_whose_other_ranks_never_come_says_so_and_ends_at_the_timeout(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rendezvous address set, but no rank 1: rank 0 says where it waits and for how long
    (--hpml-dist-timeout), then ends with a usage error saying why."""
    _project(project, "def test_x():\n    pass\n")
    port = _free_port()
    for name, value in {**TORCHRUN, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    result = project.run_subprocess("--hpml-dist-timeout=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        [
            f"hpml: torchrun rank 0 of 2: joining the others at 127.0.0.1:{port} (gloo), for at "
            "most 2 s (--hpml-dist-timeout)"
        ]
    )
    result.stderr.fnmatch_lines(
        [
            f"ERROR: hpml: torchrun rank 0 of 2 could not join the process group at "
            f"127.0.0.1:{port} (gloo) within 2 s: DistStoreError: *1/2 clients joined*"
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_rendezvous_that_fails_says_torchs_first_line_only(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch logs each failed try to reach the store with its exception's C++ backtrace: some
    40 lines of frames came before the one line that says what failed."""
    _project(project, "def test_x():\n    pass\n")
    for name, value in {**TORCHRUN, "MASTER_ADDR": "no.such.host.invalid"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    result = project.run_subprocess("--hpml-dist-timeout=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.errlines == [
        line for line in result.errlines if line.startswith("ERROR: hpml: ") or not line
    ], result.stderr.str()
    result.stderr.fnmatch_lines(
        [
            "ERROR: hpml: torchrun rank 0 of 2 could not join the process group at "
            "no.such.host.invalid:* (gloo) within 1 s: *"
        ]
    )
    assert "frame #" not in result.stdout.str() + result.stderr.str()


def test_a_launch_without_a_local_rank_is_one_rank_a_machine_and_says_so(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubeflow's PyTorchJob sets RANK, WORLD_SIZE and MASTER_* but no LOCAL_RANK: such a
    launch ran its tests as no launch, and the rank fixture asked for a distributed mark."""
    _project(project, "def test_rank(rank, world_size, record):\n    record(rank=rank)\n")
    environ = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for name, value in {**environ, "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    result = project.run_subprocess()
    result.assert_outcomes(passed=1)
    assert [r["rank"] for r in project.records()] == [0]
    result.stdout.fnmatch_lines(
        [
            "*PytestConfigWarning: hpml: LOCAL_RANK is not set: local rank 0, one rank per "
            "machine (as Kubeflow's PyTorchJob starts them); set LOCAL_RANK where a machine "
            "runs several ranks"
        ]
    )


def _unbuilt_backend() -> str:
    """A backend this torch was built without (mpi, on the wheels of PyPI)."""
    import torch.distributed as dist

    for backend in ("mpi", "nccl", "gloo"):
        if not getattr(dist, f"is_{backend}_available")():
            return backend
    pytest.skip("this torch has every torch.distributed backend")


def test_a_backend_torch_was_built_without_is_a_skip_before_any_rank_starts(
    project: Project,
) -> None:
    """As nccl without GPUs is: once, each rank printed a 76-line INTERNALERROR."""
    backend = _unbuilt_backend()
    _project(
        project,
        RANKS
        + f"""

@pytest.mark.distributed(world_size=2, backend="{backend}")
def test_marked(rank):
    pass


def test_plain(dist_backend):
    pass
""",
    )
    result = project.run(f"--hpml-dist-backend={backend}", "-rs")
    result.assert_outcomes(skipped=3)
    skips = [line for line in result.outlines if line.startswith("SKIPPED [1]")]
    built_without = (
        f"torch {torch.__version__} was built without it "
        f"(torch.distributed.is_{backend}_available() is False)"
    )
    option = f"{backend} backend (--hpml-dist-backend={backend}): {built_without}"
    marker = f"{backend} backend (@pytest.mark.distributed(backend='{backend}')): {built_without}"
    reasons = sorted(line.split(": ", 1)[1] for line in skips)
    assert reasons == sorted([option, option, marker]), skips
    assert project.records() == []  # no rank ran
    assert "INTERNALERROR" not in result.stdout.str()


def test_a_benchmark_in_a_distributed_test_is_recorded_once_from_rank_0(project: Project) -> None:
    _project(
        project,
        """
import pytest
import torch


@pytest.mark.distributed(world_size=2)
def test_bench(rank, benchmark, record):
    x = torch.randn(64, 64)
    benchmark(lambda: x @ x)
    record(rank=rank)
""",
    )
    result = project.run_subprocess("--hpml-baseline=update", "--hpml-bench-time=0.5")
    result.assert_outcomes(passed=1)
    [path] = project.baseline_dir.glob("machine-*.json")
    entries = json.loads(path.read_text())["entries"]
    assert list(entries) == ["test_inner.py::test_bench"]
    samples = entries["test_inner.py::test_bench"]["time"]["samples"]
    assert len(samples) >= 5
    assert sorted(r["rank"] for r in project.records()) == [0, 1]


def test_module_fixtures_are_torn_down_after_a_module_ending_in_a_distributed_test(
    project: Project,
) -> None:
    project.pytester.makepyfile(
        test_a="""
import pytest


@pytest.fixture(scope="module")
def opened(request):
    yield
    with (request.config.rootpath / "order.txt").open("a") as out:
        out.write("test_a closed\\n")


def test_plain(opened):
    pass


@pytest.mark.distributed(world_size=2)
def test_ranks(rank):
    pass
""",
        test_b="""
def test_next_module(request):
    with (request.config.rootpath / "order.txt").open("a") as out:
        out.write("test_b ran\\n")
""",
    )
    result = project.run_subprocess("-W", "error::ResourceWarning", "test_a.py", "test_b.py")
    result.assert_outcomes(passed=3)
    order = (project.path / "order.txt").read_text().splitlines()
    assert order == ["test_a closed", "test_b ran"]
