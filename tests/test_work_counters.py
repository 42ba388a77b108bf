"""Work counters (Note [Work counters]): a catalogue of performance bugs planted in a real
training step and eval step, each caught by a count with time out of the way, and what the
verdict names (the operator, the source line).

The inner project records its baselines with no bug planted (``--hpml-baseline=update``), then
is compared with one planted (``PLANTED_BUG``). Times are judged at a 1000% threshold: only the
counts can fail these runs, and counts do not depend on how busy the machine is.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.conftest import TIMES_UNJUDGED

if TYPE_CHECKING:
    from tests.conftest import Project

STEPS = '''
"""A training step and an eval step, with one performance bug planted by PLANTED_BUG."""

import contextlib
import os

import torch
import torch.nn.functional as F

BUG = os.environ.get("PLANTED_BUG", "")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
inputs, labels = torch.randn(16, 32), torch.randint(0, 4, (16,))
if BUG == "float64":  # data that arrived from numpy as float64, and the model made to match
    model, inputs = model.double(), inputs.double()
optimizer = torch.optim.SGD(
    model.parameters(), lr=0.01, momentum=0.9, foreach=BUG != "foreach_lost"
)
kept = []


def train_step():
    optimizer.zero_grad(set_to_none=BUG != "zero_grad_fills")
    x = inputs.t().contiguous().t() if BUG == "extra_copy" else inputs
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BUG != "autocast_off"):
        out = model(x)
        if BUG == "extra_forward":
            model(x)
    weight = torch.tensor([1.0, 1.0, 2.0, 1.0]) if BUG == "host_tensor" else None
    loss = F.cross_entropy(out.float(), labels, weight=weight)
    loss.backward()
    optimizer.step()
    if BUG == "item_every_step":
        kept.append(loss.item())
    if BUG == "branch_on_tensor" and loss > 100:
        kept.append(loss)
    if BUG == "mask_index":
        kept.append(out[labels == 0].sum())
    if BUG == "python_slowdown":  # no torch work: the counters cannot see it
        kept.append(sum(range(20_000)))
    del kept[:]


def eval_step():
    guard = contextlib.nullcontext() if BUG == "grad_in_eval" else torch.no_grad()
    with guard:
        return model(inputs).argmax(1)
'''

TESTS = """
from steps import eval_step, train_step


def test_train_step(benchmark):
    benchmark(train_step)


def test_eval_step(benchmark):
    benchmark(eval_step)
"""

TRAIN, EVAL = "test_inner.py::test_train_step", "test_inner.py::test_eval_step"
ONLY_COUNTS = (TIMES_UNJUDGED, "--hpml-report=r.json")

# bug -> (benchmark, the counter that catches it, what its reason names)
CATALOGUE = {
    "item_every_step": (TRAIN, "syncs", "aten::_local_scalar_dense at steps.py:"),
    "branch_on_tensor": (TRAIN, "syncs", "aten::_local_scalar_dense at steps.py:"),
    "mask_index": (TRAIN, "syncs", "aten::index at steps.py:"),
    "host_tensor": (TRAIN, "host_tensors", "aten::lift_fresh at steps.py:"),
    "foreach_lost": (TRAIN, "ops", "aten::_foreach_add_"),
    # one more operator (_foreach_zero_) among 52 is within what a count of operators may grow
    # by (Note [Counter policy]); the gradients it keeps are not
    "zero_grad_fills": (TRAIN, "allocated_bytes", ""),
    "float64": (TRAIN, "flops[float64]", ""),
    "autocast_off": (TRAIN, "flops[float32]", ""),
    "extra_copy": (TRAIN, "allocations", ""),
    "extra_forward": (TRAIN, "ops", "aten::addmm"),
    "grad_in_eval": (EVAL, "saved_tensors", ""),
}


@pytest.fixture
def steps(project: Project) -> Project:
    """The inner project with its counts recorded, no bug planted."""
    project.pytester.makepyfile(steps=STEPS, test_inner=TESTS)
    result = project.bench("--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    return project


def judged(project: Project) -> dict[tuple[str, str], dict[str, object]]:
    """(test, metric) -> the verdict, from the JSON report."""
    report = json.loads((project.path / "r.json").read_text())
    return {(r["test"], m): v for r in report["results"] for m, v in r["verdicts"].items()}


@pytest.mark.parametrize("bug", CATALOGUE)
def test_a_planted_bug_is_caught_by_a_count(steps: Project, bug: str) -> None:
    test, counter, named = CATALOGUE[bug]
    steps.monkeypatch.setenv("PLANTED_BUG", bug)
    result = steps.bench(*ONLY_COUNTS)
    verdict = judged(steps)[(test, counter)]
    assert verdict["verdict"] == "regressed", verdict
    assert named in str(verdict["reason"]), verdict["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert steps.verdicts(result)[(test, counter)] == "regressed"  # shown in the table


def test_the_unchanged_steps_pass_and_their_counts_stay_out_of_the_table(steps: Project) -> None:
    result = steps.bench(*ONLY_COUNTS)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    verdicts = judged(steps)
    assert {verdicts[(TRAIN, name)]["verdict"] for name in ("ops", "syncs", "allocations")} == {
        "pass"
    }
    shown = {metric for _, metric in steps.verdicts(result)}
    assert shown == {"time"}


def test_a_pure_python_slowdown_is_not_a_changed_count(steps: Project) -> None:
    """The negative control: work the dispatcher never sees. Times and instruction counts
    catch it; the work counters cannot."""
    steps.monkeypatch.setenv("PLANTED_BUG", "python_slowdown")
    steps.bench(*ONLY_COUNTS)
    counts = {
        metric: verdict["verdict"]
        for (test, metric), verdict in judged(steps).items()
        if test == TRAIN and metric != "time"
    }
    assert set(counts.values()) == {"pass"}, counts


def test_counts_are_stored_in_the_portable_file_with_what_explains_them(steps: Project) -> None:
    stored = steps.stored("portable")[TRAIN]
    assert stored["syncs"]["value"] == 0
    assert stored["ops"]["detail"]["ops"]["aten::addmm"] >= 2
    assert stored["flops[bfloat16]"]["value"] > 0
    assert stored["flops[float64]"]["value"] == 0


def test_expect_fails_the_test_naming_the_line(project: Project) -> None:
    project.pytester.makepyfile(
        steps=STEPS,
        test_inner="""
from steps import train_step


def test_never_syncs(benchmark):
    benchmark.expect(syncs=0, host_tensors=0)
    benchmark(train_step)


def test_bf16_matmuls(benchmark):
    benchmark(train_step)
    benchmark.expect(flops_float32=0)
""",
    )
    project.monkeypatch.setenv("PLANTED_BUG", "item_every_step")
    result = project.bench("--hpml-baseline=off")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: syncs: 1 per call, expected at most 0 (aten::_local_scalar_dense at "
            "steps.py:*)*"
        ]
    )


def test_expect_names_an_unknown_counter(project: Project) -> None:
    project.pytester.makepyfile(
        test_inner="def test_x(benchmark):\n    benchmark.expect(sincs=0)\n"
    )
    result = project.bench("--hpml-baseline=off")
    result.stdout.fnmatch_lines(
        ["*TypeError: expect() got unknown work counter(s) 'sincs'; known: *"]
    )


BAD_BOUNDS = """
def test_text(benchmark):
    benchmark.expect(ops="zero")


def test_nan(benchmark):
    benchmark.expect(ops=float("nan"))


def test_negative(benchmark):
    benchmark.expect(syncs=-1)


def test_no_dtype(benchmark):
    benchmark.expect(flops_=0)


def test_twice(benchmark):
    benchmark.expect(syncs=0)
    benchmark.expect(copies=0, variant="fast")  # another variant's: not the same bound
    benchmark.expect(syncs=1)
"""


def test_expect_refuses_a_bound_that_is_no_count_at_the_call(project: Project) -> None:
    """A bound that is no number failed deep in the counting, NaN passed unchecked, and a
    second bound replaced the first unsaid: each is refused at the call, and only there (no
    "nothing was benchmarked" at teardown, no "not used at all")."""
    project.pytester.makepyfile(test_inner=BAD_BOUNDS)
    result = project.bench("--hpml-baseline=off", "--tb=short")
    result.assert_outcomes(failed=5)
    bound = "give the most one call may ask for: a finite number >= 0"
    result.stdout.fnmatch_lines(
        [
            f"E   TypeError: expect(ops='zero'): {bound}",
            f"E   ValueError: expect(ops=nan): {bound}",
            f"E   ValueError: expect(syncs=-1): {bound}",
            "E   ValueError: expect(flops_=0): flops_ names no dtype; give flops_<dtype>, *",
            "E   ValueError: expect(syncs=1): an earlier expect() gave syncs=0; give one bound "
            "per counter",
        ],
        consecutive=False,
    )
    output = result.stdout.str()
    for unwanted in ("pytest_hpml/", "nothing was benchmarked", "not used at all"):
        assert unwanted not in output


def test_work_false_leaves_the_counters_out(project: Project) -> None:
    project.pytester.makepyfile(
        steps=STEPS,
        test_inner="""
import pytest

from steps import train_step


@pytest.mark.hpml_bench(work=False)
def test_train_step(benchmark):
    benchmark(train_step)
""",
    )
    project.bench("--hpml-baseline=off", "--hpml-report=r.json")
    assert set(json.loads((project.path / "r.json").read_text())["results"][0]["metrics"]) == {
        "time"
    }


def test_counts_are_judged_under_xdist(steps: Project) -> None:
    """pytest-benchmark turns timing off in xdist workers; the work is counted there anyway,
    judged, and the table, summary and report come from the controller."""
    steps.monkeypatch.setenv("PLANTED_BUG", "item_every_step")
    result = steps.run_subprocess("-n", "2", "--hpml-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert steps.verdicts(result)[(TRAIN, "syncs")] == "regressed"
    result.stdout.fnmatch_lines(["hpml: times were not measured: under pytest-xdist*"])
    verdict = judged(steps)[(TRAIN, "syncs")]
    assert "aten::_local_scalar_dense at steps.py:" in str(verdict["reason"])


def test_a_sync_line_is_named_new_or_kept_the_new_first() -> None:
    """A line the other side synced at too is no cause of the change: it is said to be kept."""
    from pytest_hpml.verdict.judge import explain

    dense = "aten::_local_scalar_dense"
    before = {"by": {"item": 1}, "sites": {dense: {"steps.py:9": 1}}}
    after = {"by": {"item": 2}, "sites": {dense: {"steps.py:9": 1, "steps.py:14": 1}}}
    assert explain(after, before) == (
        f"item: 1 -> 2 per call; where: {dense} at steps.py:14 (new), {dense} at steps.py:9 (kept)"
    )
    first = {"by": {"item": 1}, "sites": {dense: {"steps.py:14": 1}}}
    assert explain(first, {}, none_before=True).endswith("at steps.py:14 (new)")
    # where the other side's lines were not kept, none is said to be new
    assert explain(first, {}).endswith(f"{dense} at steps.py:14")
