"""``pytest-hpml merge``: the reports of a suite's shards as one report and one verdict (Note
[Sharded runs]).

One real suite is run whole and in three shards (``-k``) against one stored baseline, and the
merge of the shards' reports must give the whole run's verdicts. The session-wide control is
shown on reports whose p-values are chosen: a regression that survives in its shard alone is
adjusted once every shard's metrics are counted, and one demoted in its shard stands once the
suite's other changes support it.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml import cli
from pytest_hpml.hardware.fingerprint import Fingerprint
from pytest_hpml.model import Comparison, Result
from pytest_hpml.report import files, text
from pytest_hpml.verdict import policy, stats
from tests.conftest import TIMES_UNJUDGED

if TYPE_CHECKING:
    from tests.conftest import Project

# Four benchmarks; PLANT adds a host sync to test_sync's step, doubles test_more's work and
# halves test_less's: only the counts change, and they are judged exactly.
SUITE = """
import os

import torch

PLANT = os.environ.get("PLANT") == "1"
x = torch.ones(16, 16)


def test_same(benchmark):
    benchmark(lambda: x @ x)


def test_sync(benchmark):
    def step():
        y = x @ x
        if PLANT:
            y.sum().item()
        return y

    benchmark(step)


def test_more(benchmark):
    benchmark(lambda: [x @ x for _ in range(2 if PLANT else 1)])


def test_less(benchmark):
    benchmark(lambda: [x + x for _ in range(1 if PLANT else 2)])
"""

SHARDS = ("test_same or test_sync", "test_more", "test_less")


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def verdicts(path: Path) -> dict[tuple[str, str], str]:
    """(test id, metric) -> verdict, of a JSON report."""
    document = json.loads(path.read_text())
    return {
        (r["test"], name): v["verdict"]
        for r in document["results"]
        for name, v in r["verdicts"].items()
    }


def test_the_merge_of_three_shards_is_the_unsharded_run(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write_tests(SUITE)
    assert project.bench("--hpml-baseline=update").ret == 0
    monkeypatch.setenv("PLANT", "1")
    whole = project.bench("--hpml-report=whole.json", TIMES_UNJUDGED)
    shards, exits = [], []
    for index, selection in enumerate(SHARDS):
        shards.append(project.path / f"shard{index}.json")
        junit = f"--junitxml=shard{index}.xml"  # as the example workflow runs them
        ran = project.bench(
            "-k", selection, f"--hpml-report={shards[-1].name}", junit, TIMES_UNJUDGED
        )
        exits.append(ran.ret)
    merged, md, page = (project.path / name for name in ("merged.json", "m.md", "m.html"))
    code, out, err = run_cli(capsys, "merge", *shards, "-o", merged, "--md", md, "--html", page)

    expected = verdicts(project.path / "whole.json")
    assert verdicts(merged) == expected
    assert (code, err) == (1, "")  # as the unsharded run: a host sync fails it
    assert whole.ret == pytest.ExitCode.TESTS_FAILED
    found = {(test.rpartition("::")[2], name): v for (test, name), v in expected.items()}
    assert found[("test_sync", "syncs")] == stats.REGRESSED
    assert found[("test_more", "ops")] == stats.REGRESSED
    assert found[("test_less", "ops")] == stats.IMPROVED
    assert found[("test_same", "ops")] == stats.PASS
    document = json.loads(merged.read_text())
    assert document["control"]["tested"] == sum(
        json.loads(s.read_text())["control"]["tested"] for s in shards
    )
    assert [s["report"] for s in document["shards"]] == [str(s) for s in shards]
    assert md.read_text() == files.markdown(document, full_report=merged)
    assert "Merged from 3 reports" in md.read_text()
    assert "merged from" in page.read_text()
    assert out.splitlines()[-1].startswith("merged 3 reports: 4 tests; ")
    assert out.splitlines()[-1].endswith(": fail")
    # the workflow's premise: a shard with a regression exits 1, with no failed test in its XML
    assert exits[:2] == [pytest.ExitCode.TESTS_FAILED] * 2
    assert 'failures="0"' in (project.path / "shard0.xml").read_text()
    rendered = project.path / "again.md"  # the merged report is a report like any other
    assert run_cli(capsys, "render", merged, "--md", rendered)[0] == 0


# --- the session-wide control across shards, on chosen p-values -------------------------------

FINGERPRINT = Fingerprint("Test CPU", 4, (), None, None, "2.14.1", "3.11", "Linux-x86_64", "ci")
TIME = {"kind": "time", "unit": "s", "portable": False, "samples": [1e-3] * 10}


def shard(p_values: dict[str, float]) -> dict[str, Any]:
    """A shard's report as the plugin writes it: a time metric per test with the p-value
    given, a regression where it is below 1%, judged together by the session's own steps."""
    results = []
    for test, p in p_values.items():
        verdict = stats.REGRESSED if p < stats.ALPHA else stats.PASS
        judged = stats.Comparison(verdict, 1e-3, 1.2e-3, 0.2, 1 - p, 0.1)
        results.append(
            Result(
                test=f"test_x.py::{test}",
                threshold=0.1,
                metrics={"time": TIME},
                verdicts={"time": judged},
            )
        )
    demoted, tested = policy.control(results, strict=False)
    return {
        "format": files.REPORT_FORMAT,
        "created": "2026-01-02T03:04:05Z",
        "commit": "0123456789ab",
        "fingerprint": FINGERPRINT.as_dict(),
        "baseline_mode": "compare",
        "baseline_dir": "/ci/baselines",
        "results": [result.to_dict() for result in results],
        "counts": text.counts(results),
        "errors": [],
        "against": None,
        "instructions": None,
        "counters": "lenient",
        "control": {"tested": tested, "demoted": demoted},
    }


def written(tmp_path: Path, **documents: dict[str, Any]) -> list[Path]:
    paths = []
    for name, document in documents.items():
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(document))
    return paths


def time_verdicts(path: Path) -> dict[str, dict[str, Any]]:
    document = json.loads(path.read_text())
    return {r["test"].rpartition("::")[2]: r["verdicts"]["time"] for r in document["results"]}


def test_a_regression_that_survives_in_its_shard_alone_is_adjusted_across_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # alone, p = 0.004 among 2 tested metrics: q = 0.008 < 1%, regressed; among 10: q = 0.04
    one = shard({"test_slow": 0.004, "test_a": 0.5})
    other = shard({f"test_b{i}": 0.5 for i in range(8)})
    assert one["results"][0]["verdicts"]["time"]["verdict"] == stats.REGRESSED
    paths = written(tmp_path, one=one, other=other)
    assert run_cli(capsys, "merge", paths[0], "-o", tmp_path / "alone.json")[0] == 1

    code, out, err = run_cli(capsys, "merge", *paths, "-o", tmp_path / "merged.json")
    assert (code, err) == (0, "")
    slow = time_verdicts(tmp_path / "merged.json")["test_slow"]
    assert slow["verdict"] == stats.INCONCLUSIVE
    assert "the session's 10 tested metrics" in slow["reason"]
    assert "q = 0.040" in slow["reason"]
    assert slow[policy.BEFORE_CONTROL] == {"verdict": stats.REGRESSED, "reason": ""}
    assert out.endswith("; 9 pass, 1 inconclusive; 0 errors: pass\n")


def test_a_regression_demoted_in_its_shard_stands_with_the_suites_other_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # alone, p = 0.004 among 4: q = 0.016, inconclusive; beside six at p = 0.001, among 10,
    # its q is 0.004 * 10 / 7 = 0.0057 < 1%: a regression
    one = shard({"test_slow": 0.004, **{f"test_a{i}": 0.5 for i in range(3)}})
    other = shard({f"test_b{i}": 0.001 for i in range(6)})
    assert one["results"][0]["verdicts"]["time"]["verdict"] == stats.INCONCLUSIVE
    paths = written(tmp_path, one=one, other=other)
    code, _, err = run_cli(capsys, "merge", *paths, "-o", tmp_path / "merged.json")
    assert (code, err) == (1, "")
    found = time_verdicts(tmp_path / "merged.json")
    in_its_shard = one["results"][0]["verdicts"]["time"]
    assert in_its_shard[policy.BEFORE_CONTROL] == {"verdict": stats.REGRESSED, "reason": ""}
    earlier = policy.uncontrolled(Comparison.from_dict(in_its_shard))
    assert found["test_slow"] == earlier.to_dict()  # its reason said so
    assert sum(v["verdict"] == stats.REGRESSED for v in found.values()) == 7


# --- reports that are not shards of one run ---------------------------------------------------


def _other_machine(document: dict[str, Any]) -> None:
    document["fingerprint"]["id"] = "ffffffffffff"


def _other_mode(document: dict[str, Any]) -> None:
    document["baseline_mode"] = "off"


def _other_commit(document: dict[str, Any]) -> None:
    document["commit"] = "fedcba987654"


def _strict(document: dict[str, Any]) -> None:
    document["counters"] = "strict"


def _judged_otherwise(document: dict[str, Any]) -> None:
    document["results"] = [json.loads(json.dumps(shard({"test_a": 0.5})["results"][0]))]
    document["results"][0]["verdicts"]["time"]["verdict"] = stats.INCONCLUSIVE


def _earlier_version(document: dict[str, Any]) -> None:
    del document["control"], document["counters"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_other_machine, "their machine id differs ('ffffffffffff' in "),
        (_other_mode, "their baseline mode (--hpml-baseline) differs ('off' in "),
        (_other_commit, "their commit differs ('fedcba987654' in "),
        (_strict, "their counter policy (--hpml-counters) differs ('strict' in "),
        (
            _judged_otherwise,
            "test_x.py::test_a is in {one} and {two}, judged differently: its time is pass in "
            "{one}, inconclusive in {two}; run it in one shard only",
        ),
        (_earlier_version, "{two} was written by an earlier pytest-hpml"),
    ],
)
def test_reports_of_different_runs_are_refused_in_one_line(
    change: Any, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = shard({"test_b": 0.5})
    change(two)
    paths = written(tmp_path, one=shard({"test_a": 0.5}), two=two)
    code, out, err = run_cli(capsys, "merge", *paths, "-o", tmp_path / "merged.json")
    assert (code, out) == (2, "")
    assert err.startswith("pytest-hpml: error: ")
    assert said.format(one=paths[0], two=paths[1]) in err
    assert err.count("\n") == 1
    assert not (tmp_path / "merged.json").exists()


def test_shards_judged_against_a_revision_may_run_on_different_runners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = shard({"test_a": 0.5}), shard({"test_b": 0.5})
    _other_machine(two)
    sides = {"revision": "origin/main", "base": "1a2b3c4d5e6f", "head": "0123456789ab"}
    one["against"] = {**sides, "pairs": 5, "seconds": 20.0, "removed": ["t::gone"], "notes": []}
    two["against"] = {**sides, "pairs": 4, "seconds": 10.5, "removed": [], "notes": ["n"]}
    one["baseline_mode"] = two["baseline_mode"] = "off"
    merged, md = tmp_path / "merged.json", tmp_path / "merged.md"
    code, _, err = run_cli(
        capsys, "merge", *written(tmp_path, one=one, two=two), "-o", merged, "--md", md
    )
    assert (code, err) == (0, "")
    against = json.loads(merged.read_text())["against"]
    assert against == {
        **one["against"],
        "pairs": 4,
        "seconds": 30.5,
        "base_failed": {},
        "notes": ["n"],
    }
    machines = f"ci ({FINGERPRINT.id}), ci (ffffffffffff)"
    assert f"the shards ran on {files.md(machines)}." in md.read_text()


def test_a_test_in_two_shards_that_agree_is_kept_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = written(tmp_path, one=shard({"test_a": 0.5, "test_b": 0.5}))[0], tmp_path / "2.json"
    shutil.copy(one, two)
    code, out, _ = run_cli(capsys, "merge", one, two, "-o", tmp_path / "merged.json")
    assert code == 0
    assert "merged 2 reports: 2 tests, 2 in more than one (kept once); 2 pass" in out


@pytest.mark.parametrize("output", ["input", "twice", "baseline"])
def test_inputs_and_baselines_are_never_written(
    output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = written(tmp_path, one=shard({"test_a": 0.5}), two=shard({"test_b": 0.5}))
    before = [p.read_text() for p in paths]
    baseline = tmp_path / "baselines" / "portable-2.14.json"
    baseline.parent.mkdir()
    baseline.write_text(json.dumps({"format": "pytest-hpml-baselines/1", "entries": {}}))
    args = {
        "input": [*paths, "-o", paths[1]],
        "twice": [paths[0], paths[0], "-o", tmp_path / "m.json"],
        "baseline": [*paths, "-o", tmp_path / "m.json", "--md", baseline],
    }[output]
    code, _, err = run_cli(capsys, "merge", *args)
    assert code == 2
    assert err.count("\n") == 1
    assert {
        "input": f"-o {paths[1]} is also the report read {paths[1]}; name a file of its own",
        "twice": f"{paths[0]} is given twice",
        "baseline": f"--md {baseline} is a baseline file",
    }[output] in err
    assert [p.read_text() for p in paths] == before
    assert not (tmp_path / "m.json").exists()


WORKFLOW = (
    Path(__file__).resolve().parents[1] / "examples" / "ci" / "github-actions-perf-sharded.yml"
)


def test_the_example_workflow_merges_what_its_jobs_upload() -> None:
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    shard, verdict = workflow["jobs"]["shard"], workflow["jobs"]["verdict"]
    assert verdict["needs"] == "shard"
    run = next(s["run"] for s in shard["steps"] if "pytest" in s.get("run", ""))
    for needed in (
        "--hpml-against=",
        "--hpml-report=shard-",
        "--junitxml=shard-",
        "|| test $? -eq 1",
    ):
        assert needed in run
    merge = next(s["run"] for s in verdict["steps"] if "pytest-hpml merge" in s.get("run", ""))
    args = cli.parser().parse_args(shlex.split(merge.replace("$GITHUB_STEP_SUMMARY", "s.md"))[1:])
    assert (args.run, str(args.output), str(args.html)) == (cli.run_merge, "hpml.json", "hpml.html")
    count = next(s["run"] for s in verdict["steps"] if "wc -l" in s.get("run", ""))
    assert f"-eq {len(shard['strategy']['matrix']['part'])}" in count
