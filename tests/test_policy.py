"""Which changed counts fail a run (Note [Counter policy]) and how a change accepts what it
adds (Note [Accepted changes]): a real training step, its counts recorded with nothing
changed, then judged with one change made by ``CHANGE``. Times are judged at a 1000% threshold
where only the counts are under test: counts do not depend on how busy the machine is.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.model import Comparison
from tests.conftest import TIMES_UNJUDGED

if TYPE_CHECKING:
    from tests.conftest import Project

STEP = """
import os

import torch

CHANGE = os.environ.get("CHANGE", "")
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
    torch.nn.Linear(64, 4),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
inputs, labels = torch.randn(16, 32), torch.randint(0, 4, (16,))
logged = []


def train_step():
    optimizer.zero_grad()
    x = inputs.view(16, 32) if CHANGE == "view" else inputs  # one more view: costs nothing
    x = x * 1.0 if CHANGE == "scale" else x  # one more kernel, a few percent of the operators
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    optimizer.step()
    for _ in range({"item": 1, "two_items": 2}.get(CHANGE, 0)):  # a sync, to log the loss
        logged.append(loss.item())
    if CHANGE == "per_sample":  # the loss once more, sample by sample: many more operators
        logged.append([float(torch.nn.functional.cross_entropy(model(x[i:i + 1]), labels[i:i + 1]))
                       for i in range(4)])
"""

TEST = """
import os

from step import train_step


def test_train_step(benchmark):
    if os.environ.get("ACCEPT"):
        benchmark.expect_change(os.environ["ACCEPT_REASON"], **eval(os.environ["ACCEPT"]))
    benchmark(train_step)
"""
TRAIN = "test_inner.py::test_train_step"
ONLY_COUNTS = (TIMES_UNJUDGED, "--hpml-report=r.json")


@pytest.fixture
def step(project: Project) -> Project:
    """The inner project with the step's counts recorded, nothing changed."""
    project.pytester.makepyfile(step=STEP, test_inner=TEST)
    result = project.bench("--hpml-baseline=update")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    return project


def judged(project: Project) -> dict[str, dict[str, Any]]:
    """metric -> verdict of the step, from the JSON report."""
    report = json.loads((project.path / "r.json").read_text())
    return {m: v for r in report["results"] for m, v in r["verdicts"].items()}


def test_a_few_more_operators_are_shown_as_changed_without_failing(step: Project) -> None:
    step.monkeypatch.setenv("CHANGE", "scale")
    result = step.bench(*ONLY_COUNTS)
    ops = judged(step)["ops"]
    assert ops["verdict"] == "changed", ops
    assert ops["baseline"] < ops["current"] <= ops["baseline"] * 1.05
    assert "aten::mul" in ops["reason"]
    assert "Note [Counter policy]" in ops["reason"]
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert step.verdicts(result)[(TRAIN, "ops")] == "changed"
    result.stdout.fnmatch_lines([f"hpml: changed (not failing) {TRAIN}", "  ops: *"])


def test_a_view_is_no_operator_that_computes_and_never_fails(step: Project) -> None:
    step.monkeypatch.setenv("CHANGE", "view")
    result = step.bench(*ONLY_COUNTS)
    verdicts = judged(step)
    assert verdicts["ops"]["verdict"] == "pass", verdicts["ops"]
    views = verdicts["views"]
    assert (views["verdict"], views["current"] - views["baseline"]) == ("changed", 1), views
    assert "aten::view" in views["reason"]
    assert "views and metadata operators launch no kernel" in views["reason"]
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


@pytest.mark.parametrize("source", ["cli", "env", "ini"])
def test_the_strict_policy_fails_every_changed_count(step: Project, source: str) -> None:
    step.monkeypatch.setenv("CHANGE", "view")
    result = step.bench(*ONLY_COUNTS, *step.configure(source, counters="strict"))
    views = judged(step)["views"]
    assert views["verdict"] == "regressed", views
    assert "--hpml-counters=strict" in views["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_many_more_operators_fail(step: Project) -> None:
    step.monkeypatch.setenv("CHANGE", "per_sample")
    result = step.bench(*ONLY_COUNTS)
    ops = judged(step)["ops"]
    assert ops["verdict"] == "regressed", ops
    assert ops["change"] > 0.05
    assert "more than the 5%" in ops["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_one_more_sync_fails_whatever_its_share(step: Project) -> None:
    step.monkeypatch.setenv("CHANGE", "item")
    result = step.bench(*ONLY_COUNTS)
    verdicts = judged(step)
    assert verdicts["syncs"]["verdict"] == "regressed", verdicts["syncs"]
    assert "aten::_local_scalar_dense at step.py:" in verdicts["syncs"]["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_bad_counter_policy_is_a_usage_error(project: Project) -> None:
    project.pytester.makepyfile(test_inner="def test_x():\n    pass\n")
    result = project.run("--hpml-counters=loose")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown counter policy 'loose'; choose from lenient, strict*"])


def accept(project: Project, reason: str, **changes: str) -> None:
    project.monkeypatch.setenv("ACCEPT", repr(changes))
    project.monkeypatch.setenv("ACCEPT_REASON", reason)


def test_an_accepted_change_passes_and_says_why(step: Project) -> None:
    step.monkeypatch.setenv("CHANGE", "item")
    accept(step, "the loss is logged each step", syncs="+1")
    result = step.bench(*ONLY_COUNTS)
    syncs = judged(step)["syncs"]
    assert syncs["verdict"] == "accepted", syncs
    assert "accepted by expect_change(+1): the loss is logged each step" in syncs["reason"]
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"hpml: changed (not failing) {TRAIN}",  # a grown count of operators is, too
            "  ops: *",
            "  syncs (accepted): 0 -> 1*; accepted by expect_change(+1): the loss is logged *",
        ]
    )


def test_more_than_was_accepted_fails(step: Project) -> None:
    step.monkeypatch.setenv("CHANGE", "two_items")
    accept(step, "the loss is logged each step", syncs="+1")
    result = step.bench(*ONLY_COUNTS)
    syncs = judged(step)["syncs"]
    assert syncs["verdict"] == "regressed", syncs
    assert "beyond what expect_change(+1): the loss is logged each step accepts" in syncs["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_an_accepted_change_that_did_not_happen_says_so(step: Project) -> None:
    accept(step, "a per-sample loss", ops="+10%")
    result = step.bench(*ONLY_COUNTS)
    ops = judged(step)["ops"]
    assert ops["verdict"] == "pass", ops
    assert "did not happen here" in ops["reason"]
    assert result.ret == pytest.ExitCode.OK


def test_accepting_one_metric_does_not_excuse_another(step: Project) -> None:
    """Mechanisms do not veto one another: accepting more operators leaves a new sync failing."""
    step.monkeypatch.setenv("CHANGE", "item")
    accept(step, "more operators", ops="+10%")
    result = step.bench(*ONLY_COUNTS)
    assert judged(step)["syncs"]["verdict"] == "regressed"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


NAME = "give a metric's name: a non-empty str without control characters or blanks around it"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ("{'syncs': 'one'}", "TypeError: expect_change(syncs='one'): give how much it may grow*"),
        ("{'syncs': True}", "TypeError: expect_change(syncs=True): give how much it may grow*"),
        ("{}", "TypeError: expect_change() names no metric*"),
        # a float's overflow: '+inf%' was accepted, then an INTERNALERROR where it was applied
        (
            repr({"time": "+" + "9" * 400 + "%"}),
            "TypeError: expect_change(time='+999*... (404 characters)): give how much it may "
            "grow, as '+15%' (relative) or '+2' (per call), a finite number",
        ),
        ("{'flops_': '+1'}", "ValueError: expect_change(flops_='+1'): flops_ names no dtype*"),
        ("{'': '+1'}", f"ValueError: expect_change(**{{'': '+1'}}): {NAME}"),
        ("{' ops': '+1'}", f"ValueError: expect_change(**{{' ops': '+1'}}): {NAME}"),
    ],
)
def test_a_bad_expect_change_fails_the_test(project: Project, changes: str, message: str) -> None:
    project.pytester.makepyfile(step=STEP, test_inner=TEST)
    project.monkeypatch.setenv("ACCEPT", changes)
    project.monkeypatch.setenv("ACCEPT_REASON", "why")
    result = project.bench("--hpml-baseline=off", "--tb=short")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"E   {message}"])
    assert "pytest_hpml/" not in result.stdout.str()


def test_a_second_amount_for_a_metric_is_refused_naming_the_first(project: Project) -> None:
    """The second replaced the first unsaid; so did two spellings of one metric in a call."""
    project.pytester.makepyfile(
        test_inner="""
def test_twice(benchmark):
    benchmark.expect_change("exact GELU", time="+5%")
    benchmark.expect_change("a larger batch", time="+50%")


def test_two_spellings(benchmark):
    benchmark.expect_change("bf16 matmuls", flops_bfloat16="+1", **{"flops[bfloat16]": "+2"})
"""
    )
    result = project.bench("--hpml-baseline=off", "--tb=short")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E   ValueError: expect_change(time='+50%'): an earlier expect_change accepts +5% for "
            "'time' ('exact GELU'); accept one amount per metric",
            "E   ValueError: expect_change(**{'flops[[]bfloat16]': '+2'}): an earlier "
            "expect_change accepts +1 for 'flops[[]bfloat16]' ('bf16 matmuls')*",
        ],
        consecutive=False,
    )
    assert "not used at all" not in result.stdout.str()


def test_an_amount_shown_in_exponent_form_is_applied_as_given(step: Project) -> None:
    """An amount travels as its text: '+1234567' was written '+1.23457e+06', which could not be
    read back where it was applied (an INTERNALERROR); now the text reads back exactly."""
    accept(step, "room to grow", ops="+1234567", syncs="+0.0000001")
    result = step.bench(*ONLY_COUNTS)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    verdicts = judged(step)
    assert "expect_change(+1234567): room to grow did not happen" in verdicts["ops"]["reason"]
    assert "expect_change(+1e-07): room to grow did not happen" in verdicts["syncs"]["reason"]


def test_an_empty_reason_fails_the_test(project: Project) -> None:
    project.pytester.makepyfile(step=STEP, test_inner=TEST)
    accept(project, "  ", syncs="+1")
    result = project.bench("--hpml-baseline=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TypeError: expect_change() needs a reason*"])


def test_accepting_a_metric_the_benchmark_lacks_is_an_error(step: Project) -> None:
    accept(step, "a typo", sinks="+1")
    result = step.bench(*ONLY_COUNTS)
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            f"hpml: ERROR {TRAIN}: expect_change names 'sinks', which this benchmark does not "
            "record; it records 'allocated_bytes', *"
        ]
    )


def test_fewer_syncs_do_not_excuse_a_slower_step(step: Project) -> None:
    """A time regression fails the run whatever the counts say: the stored time is made ten
    times faster than it was measured, so the step now reads as 10x slower, while a sync the
    baseline had is gone (the baseline is edited, the counts are real)."""
    step.monkeypatch.setenv("CHANGE", "item")
    assert step.bench("--hpml-baseline=update").ret == pytest.ExitCode.OK
    path = step.baseline_files()["machine"]
    document = json.loads(path.read_text())
    time = document["entries"][TRAIN]["time"]
    time["samples"] = [s / 10 for s in time["samples"]]
    path.write_text(json.dumps(document))
    step.monkeypatch.delenv("CHANGE")
    result = step.bench("--hpml-report=r.json")
    verdicts = judged(step)
    assert verdicts["syncs"]["verdict"] == "improved"
    assert verdicts["time"]["verdict"] == "regressed", verdicts["time"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_names_a_benchmark_lacks_are_quoted() -> None:
    """An empty name read as "names , which"; a dtype-less one as "names flops[]"."""
    from pytest_hpml.verdict import policy

    said = policy.unrecorded({"": {}}, {"flops[]": 0.1}, {"time": {}})
    assert said == [
        "expect_change names '', which this benchmark does not record; it records 'time'",
        "hpml_bench(tolerance=...) names 'flops[]', which this benchmark does not count; it "
        "counts 'instructions'",
    ]


def test_an_unreadable_accepted_amount_is_not_applied_and_said() -> None:
    """Only an edited report or rerun file holds one (the call checks its amounts)."""
    from pytest_hpml.verdict import policy, stats

    grown = stats.Comparison(stats.REGRESSED, baseline=1, current=2, change=1.0)
    found = policy.settle(grown, "syncs", {"syncs": {"change": "+inf%", "reason": "r"}}, False)
    assert found.verdict == stats.REGRESSED
    assert found.reason == "expect_change's amount '+inf%' cannot be read; not applied"


# --- the rules that read several verdicts of one benchmark (Note [Counter policy]) ----------


def verdict(name: str, baseline: float, current: float) -> Comparison:
    change = current / baseline - 1 if baseline else None
    return Comparison(name, baseline=baseline, current=current, change=change)


@pytest.mark.parametrize("strict", [False, True])
def test_grown_allocations_of_a_faster_call_are_shown_not_failed(strict: bool) -> None:
    """torchmetrics 0.8.2 -> 0.9.0 (validation/cases): 40 times fewer operators, 11 times
    faster, but 98 -> 130 allocations."""
    from pytest_hpml.verdict import policy

    verdicts = {
        "time": verdict("improved", 5.0e-3, 4.3e-4),
        "allocations": verdict("regressed", 98, 130),
        "syncs": verdict("regressed", 0, 1),  # a cost: never excused by a faster call
    }
    found = policy.paid_for(verdicts, strict=strict)
    assert found["allocations"].verdict == ("regressed" if strict else "changed")
    assert found["syncs"].verdict == "regressed"
    if not strict:
        assert "the time improved" in found["allocations"].reason


def test_a_time_judged_against_a_stored_baseline_excuses_no_grown_counter() -> None:
    """A stored baseline recorded on a busy host made a fp32 step read improved -93.1%, and
    its +52% allocations then passed as changed where bf16's failed. A stored time never
    changes a counter's verdict; an instruction count, exact everywhere, still may."""
    from pytest_hpml.verdict import policy

    verdicts = {
        "time": verdict("improved", 5.0e-3, 3.4e-4),
        "allocations": verdict("regressed", 98, 149),
    }
    assert policy.paid_for(verdicts, strict=False, against=False) == verdicts
    assert policy.paid_for(verdicts, strict=False)["allocations"].verdict == "changed"
    fewer = {**verdicts, "instructions": verdict("improved", 2.0e6, 1.0e6)}
    assert policy.paid_for(fewer, strict=False, against=False)["allocations"].verdict == "changed"


def test_grown_allocations_of_a_call_not_faster_still_fail() -> None:
    from pytest_hpml.verdict import policy

    verdicts = {"time": verdict("pass", 1.0, 1.0), "allocations": verdict("regressed", 98, 130)}
    assert policy.paid_for(verdicts, strict=False) == verdicts


@pytest.mark.parametrize(
    ("syncs_before", "host_tensors_after", "expected"),
    [(6978, 2, "changed"), (1, 2, "regressed"), (0, 1, "regressed")],
)
def test_host_tensors_traded_for_fewer_syncs(
    syncs_before: int, host_tensors_after: int, expected: str
) -> None:
    """torchmetrics 1.1.1 -> 1.1.2: 6,978 syncs became 8, and 2 host tensors appeared."""
    from pytest_hpml.verdict import policy

    def verdicts() -> dict[str, Comparison]:
        syncs = "improved" if syncs_before > 0 else "pass"
        return {
            "syncs": verdict(syncs, syncs_before, 0),
            "host_tensors": verdict("regressed", 0, host_tensors_after),
        }

    found = policy.traded(verdicts(), strict=False)
    assert found["host_tensors"].verdict == expected
    assert policy.traded(verdicts(), strict=True) == verdicts()


@pytest.mark.parametrize(("change", "expected"), [(0.017, "changed"), (0.12, "regressed")])
def test_an_instruction_count_grown_within_five_percent_is_shown(
    change: float, expected: str
) -> None:
    """kornia 0.8.1 -> 0.8.2 (a literal for a 0-d tensor: harmless) counted 1.7% more
    instructions; the regressions of the corpus, 11% and more."""
    from pytest_hpml.verdict import policy, stats

    found = stats.Comparison("regressed", 2_713_656, 2_713_656 * (1 + change), change)
    assert policy.settle(found, "instructions", None, strict=False).verdict == expected
    assert policy.settle(found, "instructions", None, strict=True).verdict == "regressed"
