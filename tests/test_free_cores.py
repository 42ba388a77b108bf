"""A speed-up over more cores is judged only where the host left them free (Note [Free cores]):
what the measuring process counts as the host's other work, and the verdicts it leads to."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.bench import cores
from pytest_hpml.config.values import usable_cpus
from pytest_hpml.verdict import stats
from pytest_hpml.verdict.judge import judge_ratio
from pytest_hpml.verdict.paired import judge_paired

if TYPE_CHECKING:
    from tests.conftest import Project

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc")

SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def hogs() -> Iterator[list[int]]:
    """Busy processes on all usable cores but one, as another job on the runner: started by
    a shell that exits at once, so that they are no descendants of this process (whose own
    work would not count as the host's other work)."""
    started = []
    for _ in range(max(1, usable_cpus() - 1)):
        spin = f"{sys.executable} -c '{SPIN.format(seconds=120)}' >/dev/null 2>&1 & echo $!"
        shell = subprocess.run(["sh", "-c", spin], capture_output=True, text=True, check=True)
        started.append(int(shell.stdout))
    time.sleep(0.3)  # running, not starting
    yield started
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_another_process_counts_as_the_hosts_other_work(hogs: list[int]) -> None:
    before, theirs = cores.snapshot(), sum(cpu_seconds(pid) for pid in hogs)
    time.sleep(1.0)
    after, spent = cores.snapshot(), sum(cpu_seconds(pid) for pid in hogs) - theirs
    assert before is not None
    assert after is not None
    free = cores.free_cores(before, after)
    assert free is not None
    others = usable_cpus() - free
    # whatever else the machine does, the hogs' own CPU time is among the others'
    assert others >= spent / (after.wall - before.wall) - 0.1, (free, spent)


# Half a second of the process's own CPU time, however busy the machine, then a line.
SPUN = (
    "import sys, time\nend = time.process_time() + 0.5\nwhile time.process_time() < end:\n"
    "    pass\nprint('spun', flush=True)\n"
)


def test_a_child_process_is_this_processs_own_work() -> None:
    before = cores._tree_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", SPUN], check=True, capture_output=True)  # reaped
    child = subprocess.Popen(
        [sys.executable, "-c", SPUN + "time.sleep(60)"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "spun\n"  # still alive: read from /proc
        assert cores._tree_seconds(os.getpid()) - before >= 0.95
    finally:
        child.kill()
        child.communicate()


THREADS = """
import torch

def step():
    a = torch.ones(256, 256)
    for _ in range(4):
        a = a @ a / 256

def test_threads(benchmark):
    def on(n):
        def run():
            before = torch.get_num_threads()
            torch.set_num_threads(n)
            try:
                step()
            finally:
                torch.set_num_threads(before)
        return run
    benchmark.variants({"one": on(1), "two": on(2)}, baseline="one", cores={"two": 2})
"""


@pytest.mark.skipif(usable_cpus() < 2, reason="a speed-up over 2 cores needs 2")
def test_a_speedup_over_more_cores_measured_beside_another_job_is_not_judged(
    project: Project, hogs: list[int]
) -> None:
    project.write_tests(THREADS)
    for pid in hogs:  # record on a host whose cores are free (as far as this test can)
        os.kill(pid, signal.SIGSTOP)
    project.bench("--hpml-baseline=update").assert_outcomes(passed=1)
    stored = project.stored("machine")["test_inner.py::test_threads"]["speedup[two/one]"]
    assert stored["cores"] == 2
    for pid in hogs:  # another job takes a core while this run measures
        os.kill(pid, signal.SIGCONT)
    result = project.bench("--hpml-report=r.json")
    [found] = json.loads((project.path / "r.json").read_text())["results"]
    verdict = found["verdicts"]["speedup[two/one]"]
    assert verdict["verdict"] == "inconclusive"
    assert verdict["reason"].startswith("a speed-up over 2 cores: the host's other work left ")
    assert "free while this run measured" in verdict["reason"]
    assert found["metrics"]["speedup[two/one]"]["free_cores"] < 1.75
    assert "free_cores" not in found["metrics"]["time[two]"]  # a time is judged as ever
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)  # by the times


def _ratio(*free: float | None, cores_needed: int | None = 2) -> dict[str, Any]:
    """A speed-up record of one process run per ``free`` value, each with the same samples."""
    runs = [
        {"samples": [1.5, 1.52, 1.48, 1.51, 1.49] * 4, "free_cores": f}
        for f in free
    ]  # fmt: skip
    record = {"kind": "ratio", "unit": "x", **runs[0], "processes": runs[1:]}
    if cores_needed is not None:
        record["cores"] = cores_needed
    return record


def test_a_stored_speedup_is_judged_on_the_runs_that_had_the_cores_free() -> None:
    judged = judge_ratio(_ratio(2.0, 1.9), _ratio(1.95), 0.06)
    assert judged.verdict == stats.PASS
    short = judge_ratio(_ratio(1.0, 1.1), _ratio(1.95), 0.06)
    assert short.verdict == stats.INCONCLUSIVE
    assert "left 1 of them free while this run measured" in short.reason
    baseline_short = judge_ratio(_ratio(2.0), _ratio(0.9), 0.06)
    assert baseline_short.verdict == stats.INCONCLUSIVE
    assert "free while the baseline measured" in baseline_short.reason
    unknown = judge_ratio(_ratio(2.0), _ratio(None), 0.06)
    assert unknown.verdict == stats.INCONCLUSIVE
    assert "the baseline does not say whether they were free" in unknown.reason
    some = judge_ratio(_ratio(2.0, 1.0, 1.9), _ratio(1.95), 0.06)
    assert some.verdict == stats.PASS
    assert "judged on the 2 of 3 process runs and 1 of 1 baseline runs" in some.reason
    # a speed-up on one core each side is judged however busy the host was
    assert judge_ratio(_ratio(0.2, cores_needed=None), _ratio(0.3), 0.06).verdict == stats.PASS


def test_head_against_base_judges_a_speedup_on_the_pairs_that_had_the_cores_free() -> None:
    record = _ratio(2.0)

    def pair(free_head: float, free_base: float) -> tuple[dict[str, Any], dict[str, Any]]:
        return (_ratio(free_head), _ratio(free_base))

    busy = judge_paired(record, [pair(1.0, 2.0), pair(1.0, 1.0), pair(2.0, 0.9)], 0.06)
    assert busy.verdict == stats.INCONCLUSIVE
    assert busy.reason.startswith("a speed-up over 2 cores: the host's other work left 0.9")
    assert "free while the pairs measured" in busy.reason
    free = judge_paired(record, [pair(2.0, 2.0), pair(1.9, 2.0), pair(1.0, 2.0)], 0.06)
    assert free.verdict != stats.INCONCLUSIVE
    assert free.pairs is not None
    assert len(free.pairs) == 2


@pytest.mark.parametrize(
    ("cores_given", "said"),
    [
        ("[2]", "variants(cores=[2]): give a dict of variant names to the cores each keeps busy"),
        ("{'three': 2}", "'three' is not one of the variants ('one', 'two')"),
        ("{'two': 0}", "'two' must keep a whole number of cores >= 1 busy"),
        ("{'two': 1.5}", "'two' must keep a whole number of cores >= 1 busy"),
    ],
)
def test_variants_refuse_cores_that_name_no_variant_or_no_count(
    project: Project, cores_given: str, said: str
) -> None:
    project.write_tests(
        "def test_v(benchmark):\n"
        "    benchmark.variants({'one': lambda: 1, 'two': lambda: 2}, "
        f"cores={cores_given})\n"
    )
    result = project.bench("--hpml-baseline=off")
    result.assert_outcomes(failed=1)
    assert said in result.stdout.str()
