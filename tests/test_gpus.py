"""GPUs across pytest-xdist workers: a disjoint slice each, and tests that need more wait for
free GPUs and run apart on them. Tested on CPU by faking the GPU count at the discovery layer
(``pytest_hpml.hardware.devices.device_count``): no CUDA call is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_hpml.hardware.gpus import slices

if TYPE_CHECKING:
    from tests.conftest import Project

# Four GPUs, as CUDA_VISIBLE_DEVICES narrows them: what NVML would count.
FAKE_GPUS = """
import os

import pytest_hpml.hardware.devices


def _count():
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return 4 if value is None else len([v for v in value.split(",") if v.strip()])


pytest_hpml.hardware.devices.device_count = _count
"""

TESTS = """
import os
import time

import pytest


# Whether this worker holds the lock of each of its GPUs while its test runs (None in a
# process started apart, which the lease holds for it).
def held(config):
    import fcntl

    locks = getattr(config, "workerinput", {}).get("hpml_gpu_locks")
    if locks is None:
        return None
    found = []
    for gpu in os.environ["CUDA_VISIBLE_DEVICES"].split(","):
        with open(os.path.join(locks, f"gpu-{gpu}.lock"), "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.append(True)
            else:
                found.append(False)
    return all(found)


def use(record, config=None):
    start = time.time()
    time.sleep(0.4)
    record(gpus=os.environ.get("CUDA_VISIBLE_DEVICES"), start=start, end=time.time(),
           worker=os.environ.get("PYTEST_XDIST_WORKER"), held=config and held(config))


@pytest.mark.gpu(count=1)
@pytest.mark.parametrize("i", range(6))
def test_small(i, record, request):
    use(record, request.config)


@pytest.mark.gpu(count=3)
def test_big(record):
    use(record)


@pytest.mark.gpu(count=5)
def test_too_big(record):
    use(record)
"""


@pytest.mark.parametrize(
    ("gpus", "workers", "expected"),
    [
        (4, 2, [["0", "1"], ["2", "3"]]),
        (3, 2, [["0"], ["1", "2"]]),
        (1, 2, [[], ["0"]]),
        (8, 3, [["0", "1"], ["2", "3", "4"], ["5", "6", "7"]]),
    ],
)
def test_slices_are_disjoint_and_cover_the_gpus(
    gpus: int, workers: int, expected: list[list[str]]
) -> None:
    given = slices([str(i) for i in range(gpus)], workers)
    assert given == expected


def test_xdist_workers_get_disjoint_gpus_and_big_tests_wait_for_free_ones(
    project: Project,
) -> None:
    pytest.importorskip("xdist")
    project.pytester.makeconftest(
        project.pytester.path.joinpath("conftest.py").read_text() + FAKE_GPUS
    )
    project.write_tests(TESTS)
    result = project.run_subprocess("-n", "2", "-rs")
    result.assert_outcomes(passed=7, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "hpml: GPUs per xdist worker: gw0=0,1 gw1=2,3",
            "*needs 5 GPUs, found 4*",
        ]
    )
    records = project.records()
    small = [r for r in records if r["test"].startswith("test_small")]
    [big] = [r for r in records if r["test"] == "test_big"]
    assert {r["gpus"] for r in small} <= {"0,1", "2,3"}
    for r in small:  # each worker its own slice, held while the test runs
        assert r["gpus"] == {"gw0": "0,1", "gw1": "2,3"}[r["worker"]]
        assert r["held"] is True, r
    assert len(big["gpus"].split(",")) == 3
    for r in small:  # never two tests on one GPU at once
        shared = set(r["gpus"].split(",")) & set(big["gpus"].split(","))
        overlap = r["start"] < big["end"] and big["start"] < r["end"]
        assert not (shared and overlap), (r, big)
