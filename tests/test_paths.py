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
    data["fingerprint"]["id"] = "0123456789ab"  # so another machine: its file names it
    machine.unlink()
    (project.baseline_dir / "machine-other-0123456789ab.json").write_text(json.dumps(data))
    result = project.bench()
    assert result.ret == pytest.ExitCode.OK
    line = next(x for x in result.outlines if x.startswith("hpml: no time baselines"))
    assert "times not judged, counts judged" in line
    assert "1 other machine(s) stored, the nearest machine-other-0123456789ab.json" in line
    assert "which differs in cpu: " in line
    assert f"{other!r} there" in line
    assert "record this machine's with --hpml-baseline=update" in line


def test_a_baseline_of_this_machine_under_another_name_is_said_so(project: Project) -> None:
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, timed=True))
    project.bench("--hpml-baseline=update")
    machine = project.baseline_files()["machine"]
    machine.rename(project.baseline_dir / "machine-renamed.json")
    result = project.bench()
    assert result.ret == pytest.ExitCode.OK
    line = next(x for x in result.outlines if x.startswith("hpml: no time baselines"))
    assert (
        f"no time baselines under this machine's name ({machine.name}); machine-renamed.json "
        "has this machine's fingerprint under another name (renamed?)"
    ) in line


def test_two_machines_of_one_kind_do_not_judge_each_others_times(project: Project) -> None:
    # Two VMs of one kind: the same CPU, cores, torch and Python, two machine ids.
    project.write_tests("import torch  # noqa: F401\n" + count_tests(1, timed=True))
    project.bench("--hpml-baseline=update", "--hpml-machine-id=runner-a")
    [recorded] = project.baseline_dir.glob("machine-*.json")
    on_b = project.bench("-rA", "--hpml-machine-id=runner-b")
    assert on_b.ret == pytest.ExitCode.OK
    [line] = [x for x in on_b.outlines if "another machine of this kind" in x]
    assert line == (
        f"hpml: time baselines {recorded.name} were recorded on another machine of this kind: "
        "times not judged, counts judged; record this machine's with --hpml-baseline=update"
    )
    verdicts = {row.split()[1]: row.split()[-1] for row in _rows(on_b)}
    assert verdicts == {"time": "no-baseline", "n": "pass"}  # the count judged all the same
    on_a = project.bench("--hpml-machine-id=runner-a")  # the machine that recorded them
    assert not [x for x in on_a.outlines if "another machine" in x]
    assert {row.split()[1]: row.split()[-1] for row in _rows(on_a)}["time"] != "no-baseline"


def _rows(result: pytest.RunResult) -> list[str]:
    """The verdict table's rows of one test (``test_inner.py::test_0 METRIC VERDICT ...``)."""
    return [x for x in result.outlines if x.startswith("test_inner.py::test_0 ")]
