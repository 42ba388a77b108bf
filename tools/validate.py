"""Run the gate on the corpus of real changes (validation/cases) and write one table.

Each case names a library, two of its releases and a benchmark file written as that library's
user would write it (validation/README.md). For each case this builds the two sides, runs
pytest-hpml's gate head against base (time, work counters and, unless --no-instructions,
instruction counts) and pytest-benchmark's ``--benchmark-compare-fail=median:10%`` on the same
file, and writes what each said beside the true answer.

How the sides are built cheaply: torch (2 to 6 GB) is installed once, in the interpreter this
runs with. A side is a virtualenv without pip whose site-packages holds only the case's library
at one version (``pip install --no-deps --target``) and a ``.pth`` line that adds this
interpreter's site-packages after it (``site.addsitedir``: its own ``.pth`` files, the
editable install of pytest-hpml among them, are read too). So both sides import the same
torch, pytest and pytest-hpml, and differ only in the library; a side is a few MB and is
kept in ``--work`` for the next run. A case whose library is torch itself gets a full
virtualenv with that torch, or the interpreter given by ``--side torch==VERSION=PYTHON``.

    python tools/validate.py                      # every case, to validation/results/
    python tools/validate.py --only einops-pack   # one case
    python tools/validate.py --no-instructions --wheels DIR  # offline, from downloaded wheels
    python tools/validate.py suites --runs 10     # the scale corpus (tools/validate_suites.py)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "validation" / "cases"
# unknown: an environment case (a torch upgrade) whose true answer nobody measured apart
TRUTHS = ("regressed", "improved", "pass", "unknown")
BENCHMARK_FAIL = "median:10%"  # pytest-benchmark's comparison, as its docs suggest using it
FIELDS = ("library", "base", "head", "truth", "kind", "source", "change")
MECHANISMS = ("time", "counters", "instructions")
RIGHT = {True: "yes", False: "NO", None: "-"}


class CaseError(Exception):
    """A case that cannot run: its manifest, or building a side."""


def manifest(path: Path, fields: Sequence[str]) -> dict[str, Any]:
    """The TOML manifest in ``path`` (a case's or a suite's), with each of ``fields`` given."""
    try:
        found = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CaseError(f"{path}: {exc}") from None
    missing = [f for f in fields if not found.get(f)]
    if missing:
        raise CaseError(f"{path}: missing {', '.join(missing)}")
    return found


def load_case(folder: Path) -> dict[str, Any]:
    """A case's manifest, checked: every field present, the truth one of TRUTHS."""
    path = folder / "case.toml"
    case = manifest(path, FIELDS)
    if case["truth"] not in TRUTHS:
        raise CaseError(f"{path}: truth {case['truth']!r} is not one of {', '.join(TRUTHS)}")
    return {"name": folder.name, "folder": folder, **case}


def _torch_version() -> str:
    """This interpreter's torch release, without its local build tag."""
    from importlib.metadata import version

    return version("torch").partition("+")[0]


def _digest(items: list[str]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:8]


def side_python(case: dict[str, Any], which: str, args: argparse.Namespace) -> Path:
    """The interpreter of one side of a case (``which``: base or head), built if needed."""
    version = case[which]
    given = dict(s.rsplit("=", 1) for s in args.side)
    if f"{case['library']}=={version}" in given:
        return Path(given[f"{case['library']}=={version}"])
    if case["library"] == "torch" and _torch_version() == version:
        return Path(sys.executable)  # the shared interpreter is that side
    requires = [*case.get("requires", []), *case.get(f"{which}_requires", [])]
    pins = [f"{case['library']}=={version}", *requires]
    folder = args.work / "sides" / f"{case['library']}-{version}-{_digest(pins)}"
    python = folder / "bin" / "python"
    if (folder / ".complete").exists():
        return python
    shutil.rmtree(folder, ignore_errors=True)
    if case["library"] == "torch":  # the shared interpreter cannot lend torch to a torch side
        _full_side(folder, pins, args)
    else:
        _library_side(folder, pins, args)
    (folder / ".complete").write_text(" ".join(pins) + "\n")
    return python


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, text=True, capture_output=True, **kwargs)


def _pip(args: argparse.Namespace) -> list[str]:
    where = ["--no-index", "--find-links", str(args.wheels)] if args.wheels else []
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        *where,
    ]


def _library_side(folder: Path, pins: list[str], args: argparse.Namespace) -> None:
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(folder)])
    if made.returncode:
        raise CaseError(f"venv {folder}: {made.stderr.strip()}")
    packages = _run(
        [
            str(folder / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ]
    ).stdout.strip()
    shared = sysconfig.get_paths()["purelib"]
    Path(packages, "_hpml_validate_shared.pth").write_text(
        f"import site; site.addsitedir({shared!r})\n", encoding="utf-8"
    )
    env = {**os.environ, "PIP_CONSTRAINT": ""}  # a side pins its own versions
    found = _run([*_pip(args), "--no-deps", "--target", packages, *pins], env=env)
    if found.returncode:
        raise CaseError(f"pip install {' '.join(pins)}: {found.stderr.strip()[-2000:]}")


def _full_side(folder: Path, pins: list[str], args: argparse.Namespace) -> None:
    made = _run([sys.executable, "-m", "venv", str(folder)])
    if made.returncode:
        raise CaseError(f"venv {folder}: {made.stderr.strip()}")
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    python = str(folder / "bin" / "python")
    pip = [python, *_pip(args)[1:]]
    for step in (
        [*pins, "pytest", "pytest-benchmark", "scipy", "hypothesis"],
        ["--no-deps", "-e", str(ROOT)],
    ):
        found = _run([*pip, *step], env=env)
        if found.returncode:
            raise CaseError(f"pip install {' '.join(step)}: {found.stderr.strip()[-2000:]}")


def project(case: dict[str, Any], args: argparse.Namespace) -> Path:
    """A git repository holding the case's benchmark files, as a user's project would: the
    gate checks its HEAD out for the base side."""
    folder = args.work / "projects" / case["name"]
    shutil.rmtree(folder, ignore_errors=True)
    sources = [ROOT / p for p in case.get("tests", [])] or [case["folder"]]
    folder.mkdir(parents=True)
    for source in sources:
        for path in sorted(source.iterdir()):
            if path.suffix == ".py" or path.name == "pyproject.toml":
                shutil.copy2(path, folder / path.name)
    if not (folder / "pyproject.toml").exists():  # pytest must not find a folder's above it
        (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    git = ["git", "-C", str(folder), "-c", "user.name=validate", "-c", "user.email=v@localhost"]
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", case["name"]]):
        found = _run([*git, *step])
        if found.returncode:
            raise CaseError(f"git {' '.join(step)}: {found.stderr.strip()}")
    return folder


def run_gate(
    case: dict[str, Any], base: Path, head: Path, folder: Path, out: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """pytest-hpml's gate: the head side against the base side, in pairs of processes."""
    extra = [*(["--hpml-instructions=all"] if args.instructions else []), *args.hpml]
    exit, wall, document = run_against(head, base, folder, out, extra)
    return {"exit": exit, "wall": wall, **(_verdicts(document) if document else {})}


def run_against(
    head: Path, base: Path | None, folder: Path, out: Path, extra: Sequence[str]
) -> tuple[int, float, dict[str, Any] | None]:
    """``pytest --hpml-against=HEAD`` by ``head``'s interpreter in ``folder`` (``base``'s the
    base side's, if given), its log and report in ``out``: exit status, wall time, report."""
    report = out / "hpml.json"
    command = [
        str(head), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "--hpml-against=HEAD",
        f"--hpml-report={report}", *([f"--hpml-against-python={base}"] if base else []), *extra,
    ]  # fmt: skip
    exit, wall = timed_run(command, folder, out / "hpml.log")
    document = json.loads(report.read_text(encoding="utf-8")) if report.exists() else None
    return exit, wall, document


def timed_run(command: list[str], folder: Path, log: Path) -> tuple[int, float]:
    """``command`` run in ``folder`` in a clean environment, its output written to ``log``:
    its exit status and its wall time in seconds."""
    started = time.monotonic()
    found = _run(command, cwd=folder, env=_clean_env())
    wall = time.monotonic() - started
    log.write_text(found.stdout + found.stderr, encoding="utf-8")
    return found.returncode, round(wall, 1)


def _clean_env() -> dict[str, str]:
    """This environment without the settings a case must not inherit."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("HPML_", "PYTEST_"))}


def _verdicts(document: dict[str, Any]) -> dict[str, Any]:
    """What the gate said, by mechanism: time, work counters, instructions."""
    said: dict[str, list[dict[str, Any]]] = {"time": [], "counters": [], "instructions": []}
    for result in document.get("results", []):
        for name, verdict in result["verdicts"].items():
            base = name.partition("[")[0]
            group = "time" if base == "time" else "instructions" if base == "instructions" else None
            if group is None and result["metrics"].get(name, {}).get("kind") == "count":
                group = "counters"
            if group is not None:
                said[group].append({"test": result["test"], "metric": name, **verdict})
    return {group: _summary(found) for group, found in said.items()}


ORDER = (
    "regressed",
    "accepted",
    "changed",
    "improved",
    "inconclusive",
    "pass",
    "new",
    "no-baseline",
)


def _summary(found: list[dict[str, Any]]) -> dict[str, Any]:
    """One mechanism's answer: its worst verdict, the changes, what its reasons named."""
    if not found:
        return {"verdict": "-"}
    worst = min(found, key=lambda v: ORDER.index(v["verdict"]) if v["verdict"] in ORDER else 99)
    moved = [v for v in found if v["verdict"] not in ("pass", "no-baseline")]
    named = sorted(
        (
            f"{v['metric']}: {v['reason']}"
            for v in found
            if v["verdict"] == worst["verdict"] != "pass" and v.get("reason")
        ),
        key=lambda reason: " per call" not in reason,  # those naming operators or functions first
    )
    return {
        "verdict": worst["verdict"],
        "changes": {v["metric"]: v.get("change") for v in moved},
        # the changes of the metrics that got the worst verdict, the one shown
        "worst": [v.get("change") for v in moved if v["verdict"] == worst["verdict"]],
        "named": "; ".join(named),
    }


def run_benchmark(
    case: dict[str, Any], base: Path, head: Path, folder: Path, out: Path
) -> dict[str, Any]:
    """pytest-benchmark alone: the base side saved, the head side compared with
    --benchmark-compare-fail (pytest-hpml off: its plugin is not loaded)."""
    storage = f"file://{out / 'pytest-benchmark'}"
    common = [
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hpml",
        "-q",
        f"--benchmark-storage={storage}",
    ]
    started = time.monotonic()
    saved = _run(
        [str(base), *common, "--benchmark-save=base", f"--benchmark-json={out / 'base.json'}"],
        cwd=folder,
        env=_clean_env(),
    )
    compared = _run(
        [
            str(head), *common, "--benchmark-compare=0001",
            f"--benchmark-compare-fail={BENCHMARK_FAIL}", f"--benchmark-json={out / 'head.json'}",
        ],
        cwd=folder, env=_clean_env(),
    )  # fmt: skip
    wall = time.monotonic() - started
    (out / "pytest-benchmark.log").write_text(
        saved.stdout + compared.stdout + compared.stderr, encoding="utf-8"
    )
    change = _median_change(out / "base.json", out / "head.json")
    return {
        "exit": compared.returncode,
        "base_exit": saved.returncode,
        "change": change,
        "wall": round(wall, 1),
    }


def _median_change(base: Path, head: Path) -> float | None:
    """The largest change of a benchmark's median between the two runs' JSON files."""
    try:
        medians = [
            {b["fullname"]: b["stats"]["median"] for b in json.loads(p.read_text())["benchmarks"]}
            for p in (base, head)
        ]
    except (OSError, KeyError, ValueError):
        return None
    changes = [
        medians[1][k] / medians[0][k] - 1
        for k in medians[0]
        if k in medians[1] and medians[0][k] > 0
    ]
    return max(changes, key=abs) if changes else None


def answered(case: dict[str, Any], gate: dict[str, Any]) -> bool | None:
    """Whether the gate gave the true answer: a regression fails the run, a harmless change
    or a fix does not (and a fix reads as an improvement)."""
    if case["truth"] == "unknown":
        return None
    if case["truth"] == "regressed":
        return gate["exit"] == 1
    if gate["exit"] != 0:
        return False
    if case["truth"] == "improved":
        return any(
            gate.get(m, {}).get("verdict") == "improved"
            for m in ("time", "counters", "instructions")
        )
    return True


def run_case(case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / case["name"]
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    row: dict[str, Any] = {k: case[k] for k in (*FIELDS, "name")}
    try:
        base, head = side_python(case, "base", args), side_python(case, "head", args)
        folder = project(case, args)
    except CaseError as exc:
        return {**row, "error": str(exc), "wall": round(time.monotonic() - started, 1)}
    row["setup"] = round(time.monotonic() - started, 1)
    row["gate"] = run_gate(case, base, head, folder, out, args)
    row["correct"] = answered(case, row["gate"])
    if args.benchmark:
        row["pytest_benchmark"] = run_benchmark(case, base, head, folder, out)
    row["wall"] = round(time.monotonic() - started, 1)
    return row


def _cell(said: dict[str, Any] | None) -> str:
    if not said or said.get("verdict") in (None, "-"):
        return "-"
    changes = [c for c in said.get("worst", []) if c is not None]
    shown = f" {max(changes, key=abs):+.1%}" if changes else ""
    return f"{said['verdict']}{shown}"


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per case, then the totals."""
    head = (
        "| case | library | base -> head | truth | time | counters | instructions | gate exit | "
        "right | what it named | pytest-benchmark median | its exit | wall s |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['name']} | {r['library']} | {r['base']} -> {r['head']} | {r['truth']} "
                f"| error: {_short(r['error'], 120)} |||||||||"
            )
            continue
        gate, bench = r["gate"], r.get("pytest_benchmark") or {}
        named = _named(gate)
        change = bench.get("change")
        lines.append(
            f"| {r['name']} | {r['library']} | {r['base']} -> {r['head']} | {r['truth']} | "
            + " | ".join(_cell(gate.get(m)) for m in MECHANISMS)
            + " | "
            f"{gate['exit']} | {RIGHT[r['correct']]} | {_short(named)} | "
            f"{'-' if change is None else f'{change:+.1%}'} | {bench.get('exit', '-')} | "
            f"{r['wall']} |"
        )  # fmt: skip
    return "\n".join([*lines, "", *totals(rows)]) + "\n"


def _named(gate: dict[str, Any]) -> str:
    """What the gate's reasons named: the counters' operators first, then the functions of the
    instruction counts, then the time's reason."""
    found = [gate.get(m, {}).get("named", "") for m in ("counters", "instructions", "time")]
    return next((n for n in found if " per call" in n), next((n for n in found if n), ""))


def _short(text: str, limit: int = 160) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def totals(rows: list[dict[str, Any]]) -> list[str]:
    """The targets' figures: regressions caught (and named), harmless pairs failed."""
    ran = [r for r in rows if "error" not in r]
    lines = []
    for truth in TRUTHS[:-1]:  # not unknown
        these = [r for r in ran if r["truth"] == truth]
        if not these:
            continue
        right = sum(r["correct"] for r in these)
        bench = sum(
            (r.get("pytest_benchmark", {}).get("exit") == 1) == (truth == "regressed")
            for r in these
        )
        if truth == "regressed":
            named = sum(bool(r["correct"] and " per call" in _named(r["gate"])) for r in these)
            lines.append(f"- regressed and caught with the operator or function named: {named}")
        lines.append(
            f"- {truth}: the gate right on {right} of {len(these)}; "
            f"pytest-benchmark on {bench} of {len(these)}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["suites"]:  # the scale corpus: whole suites (validation/suites)
        import validate_suites

        return validate_suites.main(given[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="case names (folders) to run")
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument(
        "--work",
        type=Path,
        default=ROOT / ".validate",
        help="sides and projects, kept between runs",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "validation" / "results")
    parser.add_argument("--wheels", type=Path, help="install the sides from these wheels, offline")
    parser.add_argument(
        "--side",
        action="append",
        default=[],
        metavar="LIB==VERSION=PYTHON",
        help="use this interpreter as a side",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="cases run at once (each case's processes: 1 thread)"
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="rebuild the table from --out's reports, running nothing",
    )
    parser.add_argument("--no-instructions", dest="instructions", action="store_false")
    parser.add_argument(
        "--no-benchmark",
        dest="benchmark",
        action="store_false",
        help="skip pytest-benchmark's runs",
    )
    parser.add_argument(
        "--hpml",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more option for the gate's pytest",
    )
    args = parser.parse_args(argv)
    args.work, args.out = args.work.resolve(), args.out.resolve()
    folders = sorted(p for p in args.cases.iterdir() if (p / "case.toml").exists())
    if args.only:
        unknown = set(args.only) - {p.name for p in folders}
        if unknown:
            parser.error(f"no such case: {', '.join(sorted(unknown))}")
        folders = [p for p in folders if p.name in args.only]
    try:
        cases = [load_case(p) for p in folders]
    except CaseError as exc:
        parser.error(str(exc))
    if args.render:
        return render(args.out)
    started = time.monotonic()

    def one(numbered: tuple[int, dict[str, Any]]) -> dict[str, Any]:
        number, case = numbered
        row = run_case(case, args)
        print(
            f"[{number}/{len(cases)}] {case['name']}: {case['library']} {case['base']} -> "
            f"{case['head']} ({case['truth']}): {row.get('error') or _said(row)}",
            flush=True,
        )
        return row

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(one, enumerate(cases, 1)))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"wall": round(time.monotonic() - started, 1), "cases": rows}
    (args.out / "results.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (args.out / "results.md").write_text(table(rows))
    print(table(rows))
    print(f"{len(rows)} case(s) in {summary['wall']:.0f} s; results in {args.out}")
    return 1 if any("error" in r for r in rows) else 0


def render(out: Path) -> int:
    """The table again from the results and each case's report (after a change of how they are
    summarized): nothing is run."""
    summary = json.loads((out / "results.json").read_text())
    for row in summary["cases"]:
        report = out / row["name"] / "hpml.json"
        if "gate" in row and report.exists():
            row["gate"].update(_verdicts(json.loads(report.read_text(encoding="utf-8"))))
            row["correct"] = answered(row, row["gate"])
    (out / "results.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (out / "results.md").write_text(table(summary["cases"]))
    print(table(summary["cases"]))
    return 0


def _said(row: dict[str, Any]) -> str:
    gate = row["gate"]
    parts = [f"{m} {_cell(gate.get(m))}" for m in ("time", "counters", "instructions")]
    bench = row.get("pytest_benchmark")
    if bench:
        parts.append(f"pytest-benchmark exit {bench['exit']}")
    right = {True: "right", False: "WRONG", None: "no true answer"}[row["correct"]]
    return f"gate exit {gate['exit']} ({right}): {', '.join(parts)}; {row['wall']} s"


if __name__ == "__main__":
    sys.exit(main())
