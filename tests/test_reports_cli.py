"""The HTML report, the ``pytest-hpml`` command and the example CI workflow.

Documents are built the way ``Regression.document`` builds them (records judged by
``judge_metric``), from made-up samples, so these tests run in well under a second each; one
end-to-end run checks the plugin writes the same report.
"""

from __future__ import annotations

import base64
import html
import json
import random
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pytest_hpml import cli
from pytest_hpml.hardware.fingerprint import Fingerprint
from pytest_hpml.model import Comparison, Result, results_of
from pytest_hpml.report import files, text
from pytest_hpml.report import html as hpml_html
from pytest_hpml.verdict import baselines
from pytest_hpml.verdict.judge import judge_metric
from pytest_hpml.verdict.paired import judge_paired
from pytest_hpml.verdict.stats import median

if TYPE_CHECKING:
    from tests.conftest import Project

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "examples" / "ci"
FINGERPRINT = Fingerprint("Test CPU", 4, (), None, None, "2.14.1", "3.11", "Linux-x86_64", "ci")
ODD_ID = "test_odd.py::test_shape[<b>&\"'x]"  # must come out escaped, never as markup
IMG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def timed(median: float, n: int = 30, seed: int = 0, reference: float = 0.01) -> dict[str, Any]:
    """A time record: ``n`` samples scattered 3% around ``median``, reference times alike."""
    rng = random.Random(seed)
    return {
        "kind": "time",
        "unit": "s",
        "portable": False,
        "samples": [median * rng.uniform(0.97, 1.03) for _ in range(n)],
        "reference": [reference * rng.uniform(0.98, 1.02) for _ in range(n)],
    }


def rated(record: dict[str, Any], amount: float) -> dict[str, Any]:
    rate = {**record, "kind": "rate", "unit": "samples/s"}
    rate["samples"] = [amount / s for s in record["samples"]]
    return rate


def counted(value: float) -> dict[str, Any]:
    return {"kind": "count", "unit": "", "portable": True, "value": value, "tolerance": 0.0}


# test id -> metric -> (baseline record or None, current record)
CASES: dict[str, dict[str, tuple[dict[str, Any] | None, dict[str, Any]]]] = {
    "test_a.py::test_steady": {"time": (timed(1e-3), timed(1e-3, seed=1))},
    "test_a.py::test_slower": {
        "time": (timed(1e-3), timed(1.5e-3, seed=2)),
        "throughput": (rated(timed(1e-3), 32), rated(timed(1.5e-3, seed=2), 32)),
        "params": (counted(100), counted(100)),
    },
    "test_a.py::test_faster": {"time": (timed(2e-3), timed(1e-3, seed=3))},
    "test_a.py::test_few": {"time": (timed(1e-3, n=3), timed(1e-3, n=3, seed=4))},
    ODD_ID: {"time": (None, timed(5e-6, seed=5))},
}


def make_document(directory: Path, mode: str = "compare") -> dict[str, Any]:
    """A report as ``Regression.document`` writes it, against baselines in ``directory``."""
    results = []
    for test, metrics in CASES.items():
        verdicts = {
            name: judge_metric(current, base, 0.1).to_dict()
            for name, (base, current) in metrics.items()
        }
        current = {name: record for name, (_, record) in metrics.items()}
        results.append({"test": test, "threshold": 0.1, "metrics": current, "verdicts": verdicts})
    return {
        "format": files.REPORT_FORMAT,
        "created": "2026-01-02T03:04:05Z",
        "commit": "0123456789ab",
        "fingerprint": FINGERPRINT.as_dict(),
        "baseline_mode": mode,
        "baseline_dir": str(directory),
        "results": results,
        "counts": text.counts([Result.from_dict(result) for result in results]),
        "errors": [],
    }


def write_baselines(directory: Path) -> tuple[Path, Path]:
    """The baseline files the cases were judged against: machine and portable."""
    machine, portable = {}, {}
    for test, metrics in CASES.items():
        for name, (base, _) in metrics.items():
            if base is not None:
                target = portable if base["portable"] else machine
                target.setdefault(test, {})[name] = {**base, "recorded": "2026-01-01T00:00:00Z"}
    paths = (
        baselines.machine_path(directory, FINGERPRINT),
        baselines.portable_path(directory, FINGERPRINT),
    )
    baselines.merge(paths[0], machine, {"fingerprint": FINGERPRINT.as_dict()})
    baselines.merge(paths[1], portable, {"torch": FINGERPRINT.torch_minor})
    return paths


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A baselines directory holding the cases' baselines."""
    directory = tmp_path / "baselines"
    write_baselines(directory)
    return directory


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """A document and its HTML report with the baseline samples, drawn once (about a second)."""
    directory = tmp_path_factory.mktemp("rendered") / "baselines"
    write_baselines(directory)
    document = make_document(directory)
    return document, hpml_html.render(document, hpml_html.stored_baselines(document))


@pytest.fixture
def report(tmp_path: Path, stored: Path) -> Path:
    """A JSON report judged against ``stored``."""
    path = tmp_path / "hpml.json"
    files.write_json(path, make_document(stored))
    return path


@pytest.fixture
def corrupt(tmp_path: Path) -> Path:
    path = tmp_path / "broken.json"
    path.write_text('{"format": "pytest-hpml-baselines/1", "entries": {', encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# --- the HTML report -----------------------------------------------------------------------


def test_html_report_is_one_standalone_page(rendered: tuple[dict[str, Any], str]) -> None:
    _, page = rendered
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<html") == 1
    assert page.count("</html>") == 1
    # nothing fetched from elsewhere: no external src/href, no stylesheet or script links
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page
    assert "<link" not in page
    images = IMG.findall(page)
    # the chart of changes, then one figure per test with a time or rate metric
    assert len(images) == 1 + len(CASES)
    assert all(base64.b64decode(data).startswith(b"\x89PNG") for data in images)


def test_html_report_escapes_test_ids_and_shows_every_verdict(
    rendered: tuple[dict[str, Any], str],
) -> None:
    document, page = rendered
    for test in CASES:
        assert html.escape(test) in page
    assert ODD_ID not in page
    assert "<b>&" not in page
    table = page[page.index("<table>") : page.index("</table>")]
    verdicts = [row["verdict"] for row in text.rows(results_of(document))]
    assert set(verdicts) == {"pass", "regressed", "improved", "inconclusive", "no-baseline"}
    assert re.findall(r"<b style='color:#\w+'>([\w-]+)</b>", table) == verdicts
    assert "too few samples" in table  # the inconclusive verdict says why


def test_html_report_header_has_machine_commit_and_counts(
    rendered: tuple[dict[str, Any], str],
) -> None:
    document, page = rendered
    assert "pytest-hpml benchmarks: fail: 1 of 5 benchmarks regressed; 1 inconclusive" in page
    assert html.escape(FINGERPRINT.label) in page
    assert FINGERPRINT.id in page
    assert "0123456789ab" in page
    assert "2026-01-02T03:04:05Z" in page
    for verdict, count in document["counts"].items():
        assert f"{count} {verdict}</span>" in page


def test_baseline_samples_come_from_the_compared_file_only(stored: Path) -> None:
    document = make_document(stored)
    entries = hpml_html.stored_baselines(document)
    assert entries["test_a.py::test_slower"]["time"]["samples"]
    # in update mode the file already holds this run's samples: nothing to show
    assert hpml_html.stored_baselines(make_document(stored, mode="update")) == {}
    assert hpml_html.stored_baselines(document, stored.parent / "elsewhere") == {}


def test_html_report_without_matplotlib_says_how_to_install(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails
    with pytest.raises(hpml_html.ReportError, match=r"needs matplotlib: pip install"):
        hpml_html.render(make_document(stored))


AGAINST_ID = "tests/models/test_training_step.py::TestTrainingStep::test_step[cpu-bf16]"


def process(cpu: float, seed: int, n: int = 20) -> dict[str, Any]:
    """One process's time record as --hpml-against measures it on a busy machine: samples on
    the measuring thread's CPU clock near ``cpu``, wall-clock ones 1.5 to 4x longer but for
    the first (the thread did the work: its CPU clock is what is judged)."""
    rng = random.Random(seed)
    cpu_samples = [cpu * rng.uniform(1.0, 1.02) for _ in range(n)]
    wall = [c * (1.02 if i == 0 else rng.uniform(1.5, 4)) for i, c in enumerate(cpu_samples)]
    return {
        "kind": "time",
        "unit": "s",
        "portable": False,
        "samples": wall,
        "cpu_samples": cpu_samples,
    }


def against_document() -> dict[str, Any]:
    """A report of head against base: 5 pairs, head 1.09 ms and base 706 us on the CPU clock,
    judged by ``judge_paired`` as the plugin does (the case of the picture that showed head's
    wall-clock samples against base's best)."""
    pairs = [(process(1.09e-3, 2 * i), process(0.706e-3, 2 * i + 1)) for i in range(5)]
    verdict = json.loads(json.dumps(judge_paired(pairs[0][0], pairs, 0.1).to_dict()))
    results = [
        {
            "test": AGAINST_ID,
            "threshold": 0.1,
            "metrics": {"time": pairs[0][0]},
            "verdicts": {"time": verdict},
        }
    ]
    against = {
        "base": "1a2b3c4d5e6f",
        "revision": "origin/main",
        "head": "7a8b9c0d1e2f + changes",
        "pairs": 5,
    }
    return {**make_document(Path("nowhere"), mode="off"), "results": results, "against": against}


def figure_data(page: str) -> list[list[dict[str, Any]]]:
    """The values each figure drew, as the page embeds them: one list of panels per figure."""
    found = re.findall(r'<figure data-values="([^"]*)">', page)
    return [json.loads(html.unescape(data)) for data in found]


def test_html_figure_holds_both_sides_values_that_the_verdict_used() -> None:
    document = against_document()
    [[panel]] = figure_data(hpml_html.render(document))
    verdict = document["results"][0]["verdicts"]["time"]
    assert verdict["verdict"] == "regressed"
    assert "timed on the measuring thread's CPU clock" in verdict["reason"]
    # each pair's two processes, as the verdict picked them: their fastest CPU-clock sample
    assert panel["groups"] == {"base": verdict["sides"]["base"], "head": verdict["sides"]["head"]}
    assert panel["paired"] is True
    assert panel["statistic"] == "fastest sample of each process"
    assert panel["clock"] == "the measuring thread's CPU clock"
    assert panel["threshold"] == verdict["threshold"] == 0.1
    assert panel["band"] == pytest.approx([verdict["baseline"] * 0.9, verdict["baseline"] * 1.1])
    # the table's baseline and current are the two sides' best, drawn and embedded
    [row] = text.rows(results_of(document))
    assert (row["baseline"], row["current"]) == ("706 us", "1.09 ms")
    assert text.fmt(min(panel["groups"]["base"]), "s") == row["baseline"]
    assert text.fmt(min(panel["groups"]["head"]), "s") == row["current"]
    assert (panel["baseline"], panel["current"]) == (verdict["baseline"], verdict["current"])
    # not the head's wall-clock samples, 1.5 to 4x longer, that the record holds beside them
    wall = document["results"][0]["metrics"]["time"]["samples"][1:]
    assert max(panel["groups"]["head"]) < min(wall)


def test_html_figure_of_stored_baselines_holds_the_samples_judged(
    rendered: tuple[dict[str, Any], str],
) -> None:
    document, page = rendered
    panels = {
        (result["test"], panel["metric"]): panel
        for result, drawn in zip(
            [r for r in document["results"] if "time" in r["metrics"]], figure_data(page)
        )
        for panel in drawn
    }
    panel = panels["test_a.py::test_slower", "time"]
    base, current = CASES["test_a.py::test_slower"]["time"]
    verdict = document["results"][1]["verdicts"]["time"]
    assert panel["paired"] is False
    assert panel["groups"]["baseline"] == pytest.approx(base["samples"], rel=1e-5)
    assert panel["groups"]["current"] == pytest.approx(current["samples"], rel=1e-5)
    assert "current\nnormalized" in panel["groups"]  # judged in reference units
    assert (panel["baseline"], panel["current"], panel["threshold"]) == (
        verdict["baseline"],
        verdict["current"],
        0.1,
    )
    [row] = [
        r
        for r in text.rows(results_of(document))
        if (r["test"], r["metric"]) == ("test_a.py::test_slower", "time")
    ]
    assert text.fmt(median(panel["groups"]["baseline"]), "s") == row["baseline"]
    assert text.fmt(median(panel["groups"]["current"]), "s") == row["current"]


def test_test_ids_wrap_only_between_their_parts(rendered: tuple[dict[str, Any], str]) -> None:
    document, page = rendered
    style = page[page.index("<style>") : page.index("</style>")]
    # what broke names inside a word: 'test_cas / e.py::te / st_case'
    assert "break-all" not in style
    assert "anywhere" not in style
    assert "td.test span, h3 span { white-space: nowrap; }" in style
    assert hpml_html.breakable("tests/unit/test_a.py::TestA::test_b[cpu-bf16]") == (
        "<span>tests/</span><wbr><span>unit/</span><wbr><span>test_a.py::</span><wbr>"
        "<span>TestA::</span><wbr><span>test_b</span><wbr><span>[cpu-bf16]</span>"
    )
    cells = re.findall(r"<td class='test'>(.*?)</td>", page)
    assert len(cells) == len(text.rows(results_of(document)))
    for cell in cells:  # nothing but unbreakable parts and the places between them
        assert re.fullmatch(r"<span>[^<]+</span>(<wbr><span>[^<]+</span>)*", cell), cell
    assert hpml_html.breakable(ODD_ID).count("<b>") == 0


# Added to a copy of the report (which has no script): what the browser made of the page.
PROBE = """<script>
addEventListener("load", () => {
  const lineBreaks = (cell) => {  // the text before each line break of a cell
    const found = [], range = document.createRange();
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let text = "", top = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) {
        range.setStart(node, i); range.setEnd(node, i + 1);
        const rect = range.getBoundingClientRect();
        if (top !== null && rect.top > top + 2) found.push(text);
        top = rect.top; text += node.data[i];
      }
    }
    return found.map((before) => [before, cell.textContent.slice(before.length)]);
  };
  const cells = [...document.querySelectorAll("table tr")].slice(1)
    .map((tr) => [...tr.cells].map((td) => td.textContent));
  document.body.dataset.probe = JSON.stringify({
    images: [...document.images].map((img) => img.complete && img.naturalWidth > 0),
    breaks: [...document.querySelectorAll("td.test, h3")].flatMap(lineBreaks),
    cells: cells,
    figures: [...document.querySelectorAll("figure")].map((f) => JSON.parse(f.dataset.values)),
  });
});
</script>"""
CHROMIUM = shutil.which("chromium")
NARROW = ("--window-size=420,2000", "--dump-dom")  # narrow enough that the ids wrap


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium on PATH to load the page")
def test_the_page_loads_in_chromium_and_its_figure_holds_the_table(tmp_path: Path) -> None:
    document = against_document()
    path = tmp_path / "report.html"
    path.write_text(hpml_html.render(document).replace("</body>", PROBE + "</body>"))
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *NARROW, path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    probe = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert probe is not None, "the page did not load: " + done.stderr[-2000:]
    seen = json.loads(html.unescape(probe.group(1)))
    assert seen["images"] == [True, True]  # the chart of changes and the figure, decoded
    # in a narrow window the ids wrap, between their parts only
    assert seen["breaks"]
    for before, after in seen["breaks"]:
        assert before.endswith(("/", "::")) or after.startswith("["), (before, after)
    # the table's numbers are the figure's: each side's best among its processes' values
    [[test, metric, baseline, current, *_]] = seen["cells"]
    [[panel]] = seen["figures"]
    assert (test, metric) == (AGAINST_ID, "time")
    assert text.fmt(min(panel["groups"]["base"]), panel["unit"]) == baseline == "706 us"
    assert text.fmt(min(panel["groups"]["head"]), panel["unit"]) == current == "1.09 ms"
    assert panel["threshold"] == 0.1


# --- the command line ----------------------------------------------------------------------


def test_list_names_each_file_with_machine_and_counts(
    stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "list", "--dir", stored)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["file", "machine", "id", "tests", "metrics"]
    machine, portable = lines
    assert machine.startswith(baselines.machine_path(stored, FINGERPRINT).name)
    assert FINGERPRINT.label in machine
    assert machine.split()[-3:] == [FINGERPRINT.id, "4", "5"]
    assert "portable, torch 2.14" in portable
    assert portable.split()[-2:] == ["1", "1"]


def test_list_reports_a_corrupt_file_and_lists_the_rest(
    stored: Path, corrupt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt.rename(stored / corrupt.name)
    code, out, err = run_cli(capsys, "list", "--dir", stored)
    assert code == 2
    assert "portable-torch2.14.json" in out
    assert f"{stored / corrupt.name} is not valid JSON" in err


def test_list_without_the_directory_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "list", "--dir", tmp_path / "nowhere")
    assert code == 2
    assert err == f"pytest-hpml: error: no baseline directory {tmp_path / 'nowhere'} (see --dir)\n"


def test_show_gives_medians_and_values(stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine, portable = (
        baselines.machine_path(stored, FINGERPRINT),
        baselines.portable_path(stored, FINGERPRINT),
    )
    code, out, _ = run_cli(capsys, "show", machine, "--test", "slower")
    assert code == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [row[:3] for row in rows] == [
        ["test_a.py::test_slower", "throughput", "rate"],
        ["test_a.py::test_slower", "time", "time"],
    ]
    base = CASES["test_a.py::test_slower"]["time"][0]
    assert rows[1][3:7] == [*text.fmt(median(base["samples"]), "s").split(), "30", "(1"]
    code, out, _ = run_cli(capsys, "show", portable, "--test", "*::test_slow*")
    assert code == 0
    assert out.splitlines()[1].split()[:4] == ["test_a.py::test_slower", "params", "count", "100"]


def test_show_reads_a_report_too(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "show", report, "--test", "test_odd")
    assert code == 0
    assert ODD_ID in out
    assert text.fmt(median(CASES[ODD_ID]["time"][1]["samples"]), "s") in out


def test_show_without_a_match_says_so(stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = baselines.machine_path(stored, FINGERPRINT)
    code, out, _ = run_cli(capsys, "show", path, "--test", "nothing-like-it")
    assert code == 1
    assert "no test matches 'nothing-like-it'" in out
    code, out, _ = run_cli(capsys, "show", path, "--test", "test_slowr")
    assert code == 1
    assert "nearest: test_a.py::test_slower" in out


def test_show_matches_a_glob_against_the_test_name(
    stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        capsys, "show", baselines.machine_path(stored, FINGERPRINT), "--test", "test_slow*"
    )
    assert code == 0
    assert out.splitlines()[1].split()[0] == "test_a.py::test_slower"


@pytest.mark.parametrize("target", ["dir", "/dev/null"])
def test_show_of_a_directory_or_a_device_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    path = tmp_path if target == "dir" else Path(target)
    code, _, err = run_cli(capsys, "show", path)
    assert code == 2
    what = "is a directory" if target == "dir" else "is not a regular file"
    assert err == f"pytest-hpml: error: {path} {what}; name a baseline file " + (
        "or a JSON report in it\n" if target == "dir" else "or a report\n"
    )


def test_diff_of_two_baseline_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    header = {"fingerprint": FINGERPRINT.as_dict()}
    slower = timed(1.2e-3, seed=9, reference=0.02)  # 20% slower on a machine half as fast
    baselines.merge(old, {"t::a": {"time": timed(1e-3)}, "t::gone": {"n": counted(1)}}, header)
    baselines.merge(new, {"t::a": {"time": slower}, "t::new": {"n": counted(2)}}, header)
    code, out, _ = run_cli(capsys, "diff", old, new)
    assert code == 0
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines()[1:]}
    time_row = rows["t::a", "time"]
    assert time_row[1] == time_row[3] == "ms"
    change, normalized = (float(v.rstrip("%")) for v in time_row[4:])
    assert change == pytest.approx(20, abs=2)
    assert normalized == pytest.approx(-40, abs=3)  # in reference units: faster
    assert rows["t::gone", "n"] == ["1", "-", "removed", "-"]
    assert rows["t::new", "n"] == ["-", "2", "added", "-"]


def test_diff_of_baselines_and_a_report(
    stored: Path, report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "diff", baselines.machine_path(stored, FINGERPRINT), report)
    assert code == 0
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines()[1:]}
    change = float(rows["test_a.py::test_slower", "time"][4].rstrip("%"))
    assert change == pytest.approx(50, abs=5)
    assert rows[ODD_ID, "time"][0] == "-"
    assert rows[ODD_ID, "time"][3] == "added"
    # like with like: the report's portable counts live in the portable file, not "added" here
    assert ("test_a.py::test_slower", "params") not in rows
    code, out, _ = run_cli(capsys, "diff", baselines.portable_path(stored, FINGERPRINT), report)
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines()[1:]}
    assert set(rows) == {("test_a.py::test_slower", "params")}


def test_render_writes_markdown_and_html(
    tmp_path: Path, report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md, page = tmp_path / "out" / "hpml.md", tmp_path / "out" / "hpml.html"
    code, out, _ = run_cli(capsys, "render", report, "--md", md, "--html", page)
    assert code == 0
    assert out == f"wrote {md}\nwrote {page}\n"
    document = json.loads(report.read_text())
    assert md.read_text() == files.markdown(document)
    assert page.read_text().count("data:image/png;base64,") == 1 + len(CASES)


@pytest.mark.parametrize("command", ["show", "diff", "render"])
def test_a_corrupt_file_is_a_one_line_error_naming_it(
    command: str, corrupt: Path, report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {
        "show": ["show", corrupt],
        "diff": ["diff", report, corrupt],
        "render": ["render", corrupt, "--md", corrupt.with_suffix(".md")],
    }[command]
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert out == ""
    assert err.startswith("pytest-hpml: error: ")
    assert f"{corrupt} is not valid JSON" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", ["show", "diff", "render"])
def test_a_missing_file_is_a_one_line_error_naming_it(
    command: str, tmp_path: Path, report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    args = {
        "show": ["show", missing],
        "diff": ["diff", missing, report],
        "render": ["render", missing, "--html", tmp_path / "x.html"],
    }[command]
    code, _, err = run_cli(capsys, *args)
    assert (code, err) == (2, f"pytest-hpml: error: no such file: {missing}\n")


def test_render_refuses_a_baseline_file_and_needs_an_output(
    stored: Path, report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    portable = baselines.portable_path(stored, FINGERPRINT)
    code, _, err = run_cli(capsys, "render", portable, "--md", stored / "x.md")
    assert code == 2
    assert f"{portable} is not a pytest-hpml report (format is 'pytest-hpml-baselines/1'" in err
    code, _, err = run_cli(capsys, "render", report)
    assert code == 2
    assert "--md OUT and/or --html OUT" in err


def test_render_without_matplotlib_is_an_error(
    tmp_path: Path,
    report: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    code, _, err = run_cli(capsys, "render", report, "--html", tmp_path / "x.html")
    assert code == 2
    assert "the HTML report needs matplotlib: pip install matplotlib" in err
    assert not (tmp_path / "x.html").exists()


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_python_m_runs_the_cli_without_importing_torch(stored: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pytest_hpml", "list", "--dir", str(stored)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "portable-torch2.14.json" in out.stdout
    imported = [line.rpartition("|")[2].strip() for line in out.stderr.splitlines()]
    assert "pytest_hpml.cli" in imported
    assert [m for m in imported if m.partition(".")[0] in ("torch", "matplotlib")] == []


def test_console_script_and_extras_are_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"pytest-hpml": "pytest_hpml.cli:main"}
    extras = project["optional-dependencies"]
    assert any(req.startswith("matplotlib") for req in extras["report"])
    assert any(req.startswith("matplotlib") for req in extras["test"])


# --- the Markdown summary ------------------------------------------------------------------


def test_markdown_gives_the_answer_and_the_two_sides_first() -> None:
    document = against_document()
    lines = files.markdown(document).splitlines()
    assert lines[0] == "### pytest-hpml benchmarks: fail: 1 of 1 benchmark regressed"
    against = document["against"]
    assert lines[2] == (
        f"Judged against: {files.md(text.sides(against))}; {files.md(text.differs(against))}."
    )
    assert lines[4] == f"Machine: ci ({FINGERPRINT.id}); verdicts: 1 regressed."
    assert "<details>" not in "\n".join(lines)  # one short table, open
    stored = files.markdown(make_document(Path("baselines"))).splitlines()
    assert stored[0] == (
        "### pytest-hpml benchmarks: fail: 1 of 5 benchmarks regressed; 1 inconclusive, 1 improved"
    )
    assert stored[2] == "Judged against: the stored baselines in baselines, commit 0123456789ab."


def big_document(rows: int) -> dict[str, Any]:
    """A report of ``rows`` time verdicts, every tenth regressed: a suite's worth of rows."""
    results = {r["test"]: r for r in make_document(Path("nowhere"))["results"]}
    steady, slower = results["test_a.py::test_steady"], results["test_a.py::test_slower"]
    slower = {**slower, "metrics": {"time": slower["metrics"]["time"]}}
    slower["verdicts"] = {"time": slower["verdicts"]["time"]}
    made = [
        {**(slower if i % 10 == 0 else steady), "test": f"tests/test_suite.py::test_case[{i}]"}
        for i in range(rows)
    ]
    return {**make_document(Path("nowhere")), "results": made}


def test_markdown_of_a_suite_collapses_its_tables_and_fits_a_comment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = big_document(2_000)
    path = tmp_path / "hpml.json"
    files.write_json(path, document)
    out = tmp_path / "comment.md"
    assert run_cli(capsys, "render", path, "--md", out)[0] == 0
    summary = out.read_text()
    assert len(summary) < files.COMMENT_LIMIT
    lines = summary.splitlines()
    assert lines[0] == "### pytest-hpml benchmarks: fail: 200 of 2,000 benchmarks regressed"
    # the regressions first, collapsed (200 rows), then every verdict, collapsed and cut
    opened = [line for line in lines if line.startswith("<details>")]
    assert opened == [
        "<details><summary>Regressed, accepted, improved, inconclusive or changed: 200</summary>",
        "<details><summary>All 2,000 verdicts</summary>",
    ]
    assert lines.count("</details>") == 2
    first = lines.index(opened[0])
    assert lines[first + 1] == ""  # GitHub renders the table inside only after a blank line
    assert lines[first + 2].startswith("| test | metric |")
    assert sum("**regressed**" in line for line in lines[first : lines.index("</details>")]) == 200
    assert re.search(r"^_\d[\d,]* more in the full report_$", summary, re.M)
    assert lines[-1] == (
        "**Shortened** to fit GitHub's 65,536 characters for a comment; the full report is "
        f"{files.md(path)}."
    )
    # without a JSON report, it says how to get one
    assert (
        files.markdown(document)
        .splitlines()[-1]
        .endswith("run with `--hpml-report=PATH` for the full report.")
    )
    # a short report is whole, its one table open
    short = files.markdown(big_document(8))
    assert "Shortened" not in short
    assert "<details>" not in short
    assert "**Verdicts**" in short


def test_the_terminal_table_of_a_suite_shows_what_changed_and_counts_the_rest() -> None:
    results = results_of(big_document(112))
    folded = text.table(results, fold=True)
    assert folded[0].startswith("test ")
    shown = [line.split()[0] for line in folded[1:-1]]
    assert shown == [f"tests/test_suite.py::test_case[{i}]" for i in range(0, 112, 10)]
    assert all("regressed" in line.split() for line in folded[1:-1])
    assert folded[-1] == "100 more rows not shown (100 pass); -v shows them"
    # -v: every row; and a short table is never folded
    assert len(text.table(results)) == 1 + 112
    short = results_of(big_document(text.FOLD_AT))
    assert text.table(short, fold=True) == text.table(short)


# --- the plugin writes the same report -----------------------------------------------------

BENCH = """
def test_sum(benchmark):
    benchmark(sum, range(100))
"""


def test_plugin_writes_the_html_report(project: Project) -> None:
    project.write_tests(BENCH)
    assert project.run("--hpml-baseline=update", "--hpml-bench-time=0.05").ret == 0
    result = project.run(
        "--hpml-bench-time=0.05",
        "--hpml-report=r.json",
        "--hpml-report-html=r.html",
        "--hpml-report-md=r.md",
    )
    assert (project.path / "r.html").exists(), result.stdout.str() + result.stderr.str()
    page = (project.path / "r.html").read_text()
    assert len(IMG.findall(page)) == 2  # the changes, the samples of test_sum
    assert "test_inner.py::test_sum" in page
    assert json.loads((project.path / "r.json").read_text())["format"] == files.REPORT_FORMAT


def test_plugin_without_matplotlib_stops_before_running(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hpml_html, "available", lambda: False)
    project.write_tests(BENCH)
    result = project.run("--hpml-report-html=r.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--hpml-report-html: the HTML report needs matplotlib" in result.stderr.str()


# --- the example workflow ------------------------------------------------------------------


MODES = {
    # head against base on any runner: the base commit must be fetched
    "github-actions-perf.yml": ("--hpml-against=", "git merge-base HEAD", "fetch-depth: 0"),
    # stored baselines on a dedicated runner, and how they are refreshed (the comment block)
    "github-actions-perf-baselines.yml": (
        "--hpml-baseline=compare",
        "--hpml-baseline=update",
        "git add baselines/",
    ),
}


@pytest.mark.parametrize("name", sorted(MODES))
def test_example_workflows_parse_and_use_the_reports(name: str) -> None:
    text = (WORKFLOWS / name).read_text()
    for needed in (
        *MODES[name],
        "--hpml-report=hpml.json",
        "--hpml-report-html=hpml.html",
        '--hpml-report-md="$GITHUB_STEP_SUMMARY"',
        "-c constraints.txt",
    ):
        assert needed in text
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(text)
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "pull_request" in triggers
    (job,) = workflow["jobs"].values()
    steps = {step.get("uses", "").partition("@")[0]: step for step in job["steps"]}
    assert steps["actions/setup-python"]["with"]["python-version"] == "3.11"
    assert steps["actions/upload-artifact"]["with"]["path"] == "hpml.html"
    assert steps["marocchino/sticky-pull-request-comment"]["with"]["path"] == "hpml-comment.md"
    assert "actions/checkout" in steps


# --- untrusted input -------------------------------------------------------------------------

HOSTILE_ID = "test_x.py::test_y[a`b|c<img src=x onerror=alert(1)>]"


def hostile_document(stored: Path) -> dict[str, Any]:
    """A report a pull request could craft: markup in the test id, the counts and an error."""
    document = json.loads(json.dumps(make_document(stored)))
    document["results"][0]["test"] = HOSTILE_ID
    document["counts"] = {"pass": "<script>alert(1)</script>"}  # and no regression, it says
    document["errors"] = ["<script>alert(2)</script>"]
    return document


def test_the_html_report_escapes_every_value_and_counts_verdicts_itself(stored: Path) -> None:
    document = hostile_document(stored)
    page = hpml_html.render(document, {})
    assert "<script>" not in page
    assert "<img src=x" not in page
    # the crafted "counts" cannot change the headline: the results hold regressions
    headline = "fail: 1 of 5 benchmarks regressed; 1 inconclusive, 1 improved, 1 error"
    assert f"<h1>pytest-hpml benchmarks: {headline}</h1>" in page


def test_the_markdown_summary_lets_no_name_out_of_its_cell(stored: Path) -> None:
    summary = files.markdown(hostile_document(stored))
    assert "<img" not in summary
    assert "<script>" not in summary
    row = next(line for line in summary.splitlines() if "test\\_y" in line)
    # the backtick and the bar are escaped: the row keeps its 9 cells
    assert len(re.findall(r"(?<!\\)\|", row)) == len(files.MARKDOWN_COLUMNS) + 1
    assert "\\`b\\|c&lt;img" in row


# --- what is shown: no character a terminal or a browser acts on ----------------------------

# What a crafted file carries: an OSC sequence retitling the terminal, a bell, an erase of the
# screen, a carriage return, a C1 control (CSI) and a right-to-left override.
CRAFTED = "\x1b]0;pwned\x07\x1b[2J\r\x9b\u202e"
CRAFTED_SHOWN = r"\x1b]0;pwned\x07\x1b[2J\x0d\x9b\u202e"
# The bidirectional embeddings, overrides and isolates, by their Unicode class (not by the
# ranges text.visible lists), and the marks that carry no class of their own.
BIDI_CONTROLS = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}
BIDI_MARKS = "\u200e\u200f\u061c"


def acted_on(char: str) -> bool:
    """Whether a terminal, an editor or a browser acts on ``char`` rather than showing it."""
    return (
        unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp")
        or unicodedata.bidirectional(char) in BIDI_CONTROLS
        or char in BIDI_MARKS
    )


@settings(max_examples=300)
@given(st.text(st.characters(exclude_categories=())))  # surrogates and controls included
@example(CRAFTED)
def test_visible_leaves_no_character_a_terminal_acts_on(value: str) -> None:
    shown = text.visible(value)
    assert [c for c in shown if acted_on(c)] == []
    assert text.visible(shown) == shown  # shown twice (a table, then a line) is shown once


@settings(max_examples=300)
@given(st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"))))
@example("é 中 👩‍👩‍👧 🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f a\\x1b")
def test_visible_keeps_printable_text_as_it_is(value: str) -> None:
    assume(not any(acted_on(c) for c in value))
    assert text.visible(value) == value


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (CRAFTED, CRAFTED_SHOWN),
        ("\x08\x7f\x85\t\n", r"\x08\x7f\x85\x09\x0a"),
        ("\u2066\u2069\u202a\u200f\u2028", r"\u2066\u2069\u202a\u200f\u2028"),
        ("\ud800", r"\ud800"),  # JSON can carry a lone surrogate; no terminal can be written it
        (7, "7"),
    ],
)
def test_visible_escapes_as_python_writes_a_character(value: object, shown: str) -> None:
    assert text.visible(value) == shown


def crafted_document(stored: Path) -> dict[str, Any]:
    """A report a pull request could craft: controls in every name a reviewer reads."""
    document = json.loads(json.dumps(make_document(stored)))
    result = document["results"][1]  # test_slower: times, rates and a count, regressed
    result["test"] = f"test_a.py::test{CRAFTED}[x]"
    result["verdicts"]["time"]["reason"] = f"reason{CRAFTED}"
    result["metrics"][f"params{CRAFTED}"] = result["metrics"].pop("params")
    result["verdicts"][f"params{CRAFTED}"] = result["verdicts"].pop("params")
    document["fingerprint"]["name"] = f"box{CRAFTED}"
    document["errors"] = [f"error{CRAFTED}"]
    document["commit"] = f"commit{CRAFTED}"
    return document


def test_a_crafted_report_reaches_no_output_or_file_raw(
    tmp_path: Path, stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "crafted.json"
    report.write_text(json.dumps(crafted_document(stored)), encoding="utf-8")
    md, page = tmp_path / "out.md", tmp_path / "out.html"
    shown = []
    for args in (["render", report, "--md", md, "--html", page], ["show", report]):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        shown += [out, err]
    shown += [md.read_text(encoding="utf-8"), page.read_text(encoding="utf-8")]
    for output in shown:
        assert [c for c in output if acted_on(c) and c != "\n"] == []
    assert f"test_a.py::test{CRAFTED_SHOWN}[x]" in shown[2]  # show's table
    assert f"<dd>box{html.escape(CRAFTED_SHOWN)} (" in shown[5]
    assert f"<li>error{html.escape(CRAFTED_SHOWN)}</li>" in shown[5]
    assert f"Machine: {files.md('box' + CRAFTED)} (" in shown[4]
    assert files.md(f"reason{CRAFTED}") in shown[4]


def test_the_header_shows_what_a_gpu_name_or_a_revision_may_hold() -> None:
    from pytest_hpml.report import header

    printable = ["hpml: device=cpu", "hpml: 1 GPU(s): cuda:0 NVIDIA H100 é"]
    assert header.shown(printable) is printable  # text, and what it imports, not loaded
    assert header.shown([f"hpml: against: base {CRAFTED}"]) == [
        f"hpml: against: base {CRAFTED_SHOWN}"
    ]


CRAFTED_RUN = """
def test_count(benchmark):
    benchmark.record("n\\u202e", 1, portable=True)
"""


def test_a_run_with_crafted_names_writes_none_raw(project: Project) -> None:
    """A metric and a machine named with what a terminal or a browser acts on (options and
    record() refuse controls, not bidirectional overrides): the terminal, the three reports and
    the baseline file hold no escape sequence (JSON escapes the C0 controls), and the terminal
    and the reports no C1 control or override either."""
    project.write_tests(CRAFTED_RUN)
    result = project.run(
        "--hpml-baseline=update",
        "--hpml-machine=box\u202e\u2066",
        "--hpml-report=r.json",
        "--hpml-report-md=r.md",
        "--hpml-report-html=r.html",
    )
    assert result.ret == 0, result.stdout.str()
    terminal = result.stdout.str()
    assert [c for c in terminal if acted_on(c) and c != "\n"] == []
    assert "n\\u202e" in terminal
    written = sorted(
        p
        for p in project.path.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc")  # sources, and their bytecode
    )
    assert {p.name for p in written} >= {"r.json", "r.md", "r.html"}
    for path in written:
        content = path.read_text(encoding="utf-8")
        assert not set(content) & {"\x1b", "\x07", "\r"}, path
        if path.name.startswith("r."):
            assert [c for c in content if acted_on(c) and c != "\n"] == [], path


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda r: r["verdicts"]["time"].update(verdict="<b>fine</b>"),
            "is '<b>fine</b>', not one",
        ),
        (lambda r: r["verdicts"]["time"].update(change="+3%"), "has a value that is not a number"),
        (lambda r: r["metrics"]["time"].update(samples=[float("nan")]), "positive finite numbers"),
        (lambda r: r.update(test=["not", "text"]), "its test id is not a string"),
        (
            lambda r: r["verdicts"]["time"].update(sides={"head": ["<b>"], "base": [1e-3]}),
            "its sides are not head's and base's positive values, paired",
        ),
        (lambda r: r["verdicts"]["time"].update(pairs=3), "its pairs is not a list of numbers"),
        (lambda r: r.update(uncounted="x"), "its uncounted is str, not an object"),
        (lambda r: r.update(errors=[1]), "its errors and notes must be lists of text"),
    ],
    ids=["verdict", "change", "nan-sample", "test-id", "sides", "pairs", "uncounted", "errors"],
)
def test_a_report_with_a_value_of_the_wrong_shape_is_refused_in_one_line(
    tmp_path: Path, stored: Path, capsys: pytest.CaptureFixture[str], change: Any, problem: str
) -> None:
    document = json.loads(json.dumps(make_document(stored)))  # a copy: CASES stay as they are
    change(document["results"][0])
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    code, _, err = run_cli(capsys, "render", path, "--md", tmp_path / "out.md")
    assert code == 2
    assert err.startswith(f"pytest-hpml: error: {path} is not a pytest-hpml report (result ")
    assert problem in err
    assert len(err.strip().splitlines()) == 1


def test_a_count_that_grows_from_zero_renders(
    tmp_path: Path, stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = make_document(stored)
    breaks = judge_metric(counted(1), counted(0), 0.1).to_dict()
    assert breaks["change"] is None  # no relative change from 0 (JSON has no infinity)
    assert breaks["verdict"] == "regressed"
    document["results"][0]["metrics"]["graph_breaks"] = counted(1)
    document["results"][0]["verdicts"]["graph_breaks"] = breaks
    path = tmp_path / "breaks.json"
    path.write_text(json.dumps(document, allow_nan=False), encoding="utf-8")
    code, _, err = run_cli(capsys, "render", path, "--md", tmp_path / "out.md")
    assert (code, err) == (0, ""), err


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"processes": {"not": "a list"}}, "processes and earlier must be lists"),
        ({"earlier": [{"reference": [0.1]}]}, '["earlier"][0]["samples"] is missing'),
        ({"processes": ["run"]}, 'a process run is not an object: ["processes"][0]'),
    ],
)
def test_a_stored_record_of_the_wrong_shape_is_named(record: dict[str, Any], problem: str) -> None:
    assert problem in (baselines.record_problem({**timed(1e-3), **record}) or "")


def test_a_very_long_test_id_is_cut_in_the_table_and_whole_on_hover(stored: Path) -> None:
    document = json.loads(json.dumps(make_document(stored)))
    long_id = "test_a.py::test_long[" + "x" * 5000 + "<b>]"
    document["results"][0]["test"] = long_id
    page = hpml_html.render(document, {})
    cell = re.search(r"<td class='test' title=\"([^\"]*)\">(.*?)</td>", page)
    assert cell is not None
    assert cell.group(1) == html.escape(long_id, quote=True)
    assert len(html.unescape(re.sub("<[^>]+>", "", cell.group(2)))) <= hpml_html.LONG_ID + 1


@pytest.mark.parametrize(
    ("unit", "samples"),
    [
        ("s", [0.01 * 1.5**i for i in range(12)]),  # 10 ms to 860 ms: a log axis in ms
        ("FLOP/s", [6e10 * 1.4**i for i in range(8)]),  # 60 to 630 GFLOP/s
        ("s", [0.05 * 1.05**i for i in range(40)]),  # within a decade: minor ticks labelled
    ],
)
def test_log_axis_ticks_are_plain_numbers(unit: str, samples: list[float]) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figure = Figure()
    ax = figure.add_subplot()
    record = {"kind": "rate" if "/" in unit else "time", "unit": unit, "samples": samples}
    result = Result("t", 0.06, metrics={"m": record}, verdicts={"m": Comparison("no-baseline")})
    hpml_html._panel(ax, "m", result, None)
    figure.draw_without_rendering()
    assert ax.get_yscale() == "log"
    labels = [t.get_text() for t in [*ax.get_yticklabels(), *ax.get_yticklabels(minor=True)]]
    shown = [label for label in labels if label]
    assert len(shown) >= 2
    for label in shown:
        assert re.fullmatch(r"\d+(\.\d+)?", label), labels
