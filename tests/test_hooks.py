"""The ``pytest_hpml_*`` extension points: a team's conftest replaces pytest-hpml's answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import count_tests

if TYPE_CHECKING:
    from tests.conftest import Project


def test_a_judge_hook_decides_the_verdict_of_a_metric(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.bench("--hpml-baseline=update")
    project.pytester.makeconftest(
        "from pytest_hpml.verdict.stats import REGRESSED, Comparison\n\n\n"
        "def pytest_hpml_judge_metric(name, record, baseline):\n"
        "    if name == 'n':\n"
        "        return Comparison(REGRESSED, baseline['value'], record['value'],"
        " reason='team rule')\n"
    )
    result = project.bench()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): "regressed"}


def test_without_a_judge_hook_the_same_count_passes(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.bench("--hpml-baseline=update")
    result = project.bench()
    assert result.ret == pytest.ExitCode.OK
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): "pass"}


def test_a_fingerprint_hook_keys_the_time_baselines(project: Project) -> None:
    project.pytester.makeconftest(
        "import dataclasses\n\n"
        "from pytest_hpml.hardware.devices import hardware\n"
        "from pytest_hpml.hardware.fingerprint import current\n\n\n"
        "def pytest_hpml_fingerprint(config):\n"
        "    return dataclasses.replace(current(hardware(config)), cpu='runner class A')\n"
    )
    project.write_tests(count_tests(1, portable=False, timed=True))
    assert project.bench("--hpml-baseline=update").ret == pytest.ExitCode.OK
    machine = project.baseline_files()["machine"]
    assert machine.name.startswith("machine-runner-class-a-")
    assert json.loads(machine.read_text())["fingerprint"]["cpu"] == "runner class A"


def test_a_reference_hook_replaces_the_reference_workload(project: Project) -> None:
    project.pytester.makeconftest(
        "class Fixed:\n"
        "    repeat = 1\n\n"
        "    def time(self, timer):\n"
        "        return 0.25\n\n\n"
        "def pytest_hpml_reference_workload(device, sync):\n"
        "    return Fixed()\n"
    )
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, timed=True))
    project.bench("--hpml-baseline=off", "--hpml-report=r.json")
    [result] = json.loads((project.path / "r.json").read_text())["results"]
    reference = result["metrics"]["time"]["reference"]
    assert reference
    assert set(reference) == {0.25}


CPU_FROM_ENV = (
    "import dataclasses\n"
    "import os\n\n"
    "from pytest_hpml.hardware.devices import hardware\n"
    "from pytest_hpml.hardware.fingerprint import current\n\n\n"
    "def pytest_hpml_fingerprint(config):\n"
    "    return dataclasses.replace(current(hardware(config)), cpu=os.environ['CPU'])\n"
)


@pytest.mark.parametrize(
    ("recorded", "here", "found"),
    [
        ("Intel(R) Xeon(R) Processor", "Intel(R) Xeon(R) Processor @ 2.80GHz", True),
        ("Intel(R) Xeon(R) Processor @ 2.80GHz", "Intel(R) Xeon(R) Processor", True),
        ("Intel(R) Xeon(R) Processor", "AMD EPYC", False),
        ("Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", "Intel(R) Xeon(R) CPU E5-2690 v4", False),
    ],
)
def test_a_cpu_with_or_without_its_stated_clock_shares_time_baselines(
    project: Project, recorded: str, here: str, found: bool
) -> None:
    project.pytester.makeconftest(CPU_FROM_ENV)
    project.write_tests(count_tests(1, portable=False))
    project.monkeypatch.setenv("CPU", recorded)
    assert project.run("--hpml-baseline=update").ret == pytest.ExitCode.OK
    project.monkeypatch.setenv("CPU", here)
    project.monkeypatch.setenv("COUNT", "2")
    result = project.run()
    verdict = "regressed" if found else "no-baseline"
    assert project.verdicts(result) == {("test_inner.py::test_0", "n"): verdict}


SWINGING_REFERENCE = (
    "import itertools\n\n\n"
    "class Swinging:\n"
    "    repeat = 1\n\n"
    "    def __init__(self):\n"
    "        self.times = itertools.cycle([0.001, 0.004])\n\n"
    "    def time(self, timer):\n"
    "        return next(self.times)\n\n\n"
    "def pytest_hpml_reference_workload(device, sync):\n"
    "    return Swinging()\n"
)


def test_a_busy_machine_is_flagged_when_recording_and_in_the_verdicts(project: Project) -> None:
    # A reference workload whose time swings 4x within a run is what shared cores look like.
    project.pytester.makeconftest(SWINGING_REFERENCE)
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, timed=True))
    recorded = project.bench("--hpml-baseline=update")
    assert recorded.ret == pytest.ExitCode.OK
    recorded.stdout.fnmatch_lines(
        [
            "hpml: WARNING recorded on a busy machine (the reference workload's time varied "
            "*): test_inner.py::test_0. Baselines from such runs *"
        ]
    )
    compared = project.bench("--hpml-report=r.json")
    [result] = json.loads((project.path / "r.json").read_text())["results"]
    reason = result["verdicts"]["time"]["reason"]
    assert "measured on a busy machine: the reference workload's time varied" in reason
    assert "the baseline was recorded on a busy machine" in reason
    compared.stdout.fnmatch_lines(["hpml: 1 benchmark(s) measured on a busy machine *"])


def test_the_instance_is_the_installations_machine_id_and_a_container_adds_its_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Note [Machine instance]: real files read, in a temporary directory instead of /etc.
    from pytest_hpml.hardware import fingerprint

    ids = {name: tmp_path / name for name in ("vm-a", "vm-b", "boot-1", "boot-2", "docker")}
    for path in ids.values():
        path.write_text(f"{path.name}-0123456789abcdef\n")
    found = {}
    for vm, boot, container in [("vm-a", "boot-1", ""), ("vm-b", "boot-1", ""),
                                ("vm-a", "boot-2", ""), ("vm-a", "boot-1", "docker"),
                                ("vm-a", "boot-2", "docker")]:  # fmt: skip
        monkeypatch.setattr(fingerprint, "MACHINE_ID_FILES", (str(tmp_path / "no"), str(ids[vm])))
        monkeypatch.setattr(fingerprint, "BOOT_ID_FILE", str(ids[boot]))
        where = (str(ids[container]),) if container else (str(tmp_path / "no"),)
        monkeypatch.setattr(fingerprint, "CONTAINER_FILES", where)
        found[vm, boot, container] = fingerprint.instance()
    assert found["vm-a", "boot-1", ""] == found["vm-a", "boot-2", ""]  # a reboot keeps it
    assert found["vm-a", "boot-1", ""] != found["vm-b", "boot-1", ""]
    # in a container the machine id is its image's: each boot of the host is its own machine
    assert found["vm-a", "boot-1", "docker"] != found["vm-a", "boot-2", "docker"]
    assert len(set(found.values())) == 4
    assert all(len(value) == 12 and "0123456789abcdef" not in value for value in found.values())
    assert fingerprint.instance("runner-7") == fingerprint.instance("runner-7")
    assert fingerprint.instance("runner-7") not in found.values()
