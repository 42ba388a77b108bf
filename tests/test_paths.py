"""Where results are written: every output path is checked before any test runs, a write that
still fails at the end keeps the measurements, and a baseline file behind a link stays linked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import count_tests

if TYPE_CHECKING:
    from tests.conftest import Project


def test_a_report_path_that_is_a_directory_stops_the_run_before_any_test(project: Project) -> None:
    project.write_tests(count_tests(1) + "\n\ndef test_ran(record):\n    record()\n")
    (project.path / "out").mkdir()
    result = project.run("--hpml-report=out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--hpml-report: out is a directory; name a file in it" in result.stderr.str()
    assert project.records() == []  # nothing was measured for nothing


def test_a_baseline_dir_that_is_a_file_stops_an_update_before_any_test(project: Project) -> None:
    project.write_tests(count_tests(1))
    (project.path / "baselines").write_text("not a directory")
    result = project.run("--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--hpml-baseline-dir: baselines is a file, not a directory" in result.stderr.str()


# Turns the report's directory into a file while the tests run: the end-of-run write fails.
SABOTAGE = """

def test_sabotage():
    import os, shutil
    shutil.rmtree("out")
    with open("out", "w") as handle:
        handle.write("in the way")
"""


def test_a_write_that_fails_at_the_end_keeps_the_measurements(project: Project) -> None:
    project.write_tests(count_tests(1) + SABOTAGE)
    (project.path / "out").mkdir()
    result = project.run("--hpml-report=out/r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [error] = project.hpml_errors(result)
    assert "cannot write out/r.json" in error
    kept = error.rpartition("the measurements are kept in ")[2]
    document = json.loads(Path(kept).read_text(encoding="utf-8"))
    assert document["results"][0]["test"] == "test_inner.py::test_0"
    os.unlink(kept)


def test_an_update_through_a_linked_baseline_file_updates_its_target(project: Project) -> None:
    project.write_tests(count_tests(1))
    project.run("--hpml-baseline=update")
    portable = project.baseline_files()["portable"]
    shared = project.path / "shared.json"
    os.replace(portable, shared)
    portable.symlink_to(shared)
    project.monkeypatch.setenv("COUNT", "2")
    project.run("--hpml-baseline=update")
    assert portable.is_symlink()
    entries = json.loads(shared.read_text())["entries"]
    assert entries["test_inner.py::test_0"]["n"]["value"] == 2


# CPU strings the VMs report: a test picks the one this machine does not
OTHER_CPUS = ("Intel(R) Xeon(R) Processor", "AMD EPYC 7B13")


def test_no_time_baseline_for_this_machine_names_the_nearest_stored_one(project: Project) -> None:
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, timed=True))
    project.bench("--hpml-baseline=update")
    machine = project.baseline_files()["machine"]
    data = json.loads(machine.read_text())
    other = OTHER_CPUS[data["fingerprint"]["cpu"] == OTHER_CPUS[0]]  # not this machine's
    data["fingerprint"]["cpu"] = other  # recorded on another CPU string
    machine.unlink()
    (project.baseline_dir / "machine-other-0123456789ab.json").write_text(json.dumps(data))
    result = project.bench()
    assert result.ret == pytest.ExitCode.OK
    line = next(x for x in result.outlines if x.startswith("hpml: no time baselines"))
    assert "1 other machine(s) stored, the nearest machine-other-0123456789ab.json" in line
    assert "which differs in cpu: " in line
    assert f"{other!r} there" in line
    assert "Record here with --hpml-baseline=update" in line


def test_a_baseline_of_this_machine_under_another_name_is_said_so(project: Project) -> None:
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, timed=True))
    project.bench("--hpml-baseline=update")
    machine = project.baseline_files()["machine"]
    machine.rename(project.baseline_dir / "machine-renamed.json")
    result = project.bench()
    assert result.ret == pytest.ExitCode.OK
    line = next(x for x in result.outlines if x.startswith("hpml: no time baselines"))
    assert (
        "the nearest machine-renamed.json, whose fingerprint is this machine's under another "
        f"name (renamed? this machine's is {machine.name})"
    ) in line
