"""Run the gate on the scale corpus (validation/suites): real projects' own benchmark suites,
unmodified, judged whole, and write one table.

Each folder under ``validation/suites/`` names a library, the revision of its repository whose
benchmark files are the suite, a release to run them on, and a pair of releases whose changes
its history documents (``suite.toml``; validation/README.md). The suite's files are never
copied into this repository: they come from the library's own repository, a local clone of it
(``--source NAME=DIR``, a checkout or a bare repository) or a fresh clone.

For each suite this runs, ``--runs`` times, the unchanged case as a pull request that leaves
the library alone runs it: ``pytest <suite> --hpml-against=HEAD`` in one environment holding
the release, every second run beside ``--hogs`` CPU-bound processes; and after each, the
suite's own comparison, two plain pytest-benchmark runs (pytest-hpml off), base then head.
Then the release pair, environment against environment (``--hpml-against-python``), with the
suite's files at the pair's head revision, and the same two plain runs on the two sides.

    python tools/validate_suites.py --source tensordict=/path/to/tensordict --runs 10
    python tools/validate_suites.py --render    # the table again from --out's reports
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate import ROOT, CaseError, _clean_env, _run, manifest, run_against, side_python

SUITES = ROOT / "validation" / "suites"
FIELDS = ("library", "release", "base", "head", "repository", "revision", "pair_revision", "run")
SPIN = "while True: pass"


def load_suite(folder: Path) -> dict[str, Any]:
    """A suite's manifest, checked: every field present, each known change's verdict one the
    gate gives."""
    path = folder / "suite.toml"
    suite = manifest(path, FIELDS)
    for known in suite.get("known", []):
        if known.get("verdict") not in ("regressed", "improved") or not known.get("benchmarks"):
            raise CaseError(f"{path}: a known change needs benchmarks and a verdict")
    return {"name": folder.name, "folder": folder, **suite}


def suite_files(suite: dict[str, Any], revision: str, args: argparse.Namespace) -> Path:
    """A git repository of the suite's files at ``revision``, as the library's repository has
    them: the gate checks its HEAD out for the base side."""
    sources = dict(s.split("=", 1) for s in args.source)
    repository = sources.get(suite["name"])
    if repository is None:
        repository = str(args.work / "suite-sources" / suite["name"])
        if not Path(repository).exists():
            cloned = _run(["git", "clone", "--bare", "--quiet", suite["repository"], repository])
            if cloned.returncode:
                raise CaseError(f"git clone {suite['repository']}: {cloned.stderr.strip()}")
    folder = args.work / "suite-projects" / f"{suite['name']}-{revision}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    paths = suite.get("paths") or [suite["run"]]
    archive = subprocess.run(
        ["git", f"--git-dir={_git_dir(Path(repository))}", "archive", revision, *paths],
        capture_output=True,
    )
    if archive.returncode:
        raise CaseError(f"git archive {revision} {' '.join(paths)}: {archive.stderr.decode()}")
    unpacked = subprocess.run(["tar", "x", "-C", str(folder)], input=archive.stdout)
    if unpacked.returncode:
        raise CaseError(f"tar: the archive of {revision} did not unpack")
    if not (folder / "pytest.ini").exists() and not (folder / "pyproject.toml").exists():
        (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    git = ["git", "-C", str(folder), "-c", "user.name=validate", "-c", "user.email=v@localhost"]
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", f"{revision}"]):
        found = _run([*git, *step])
        if found.returncode:
            raise CaseError(f"git {' '.join(step)}: {found.stderr.strip()}")
    return folder


def _git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def run_gate(
    suite: dict[str, Any], head: Path, base: Path | None, folder: Path, out: Path, raw: Path
) -> dict[str, Any]:
    """The gate on the whole suite: head against base, in pairs of processes. Its report (a
    megabyte or so) stays in ``raw``, under --work; its log goes to ``out``, to be kept."""
    extra = [suite["run"], *suite.get("args", [])]
    exit, wall, document = run_against(head, base, folder, raw, extra)
    shutil.copy(raw / "hpml.log", out / "hpml.log")
    return {"exit": exit, "wall": wall, **(summarized(document) if document else {})}


def summarized(document: dict[str, Any]) -> dict[str, Any]:
    """What the gate said of the suite's times: each benchmark's verdict, and how the pairs
    ended (unsettled at the cap, let go earlier)."""
    times = {
        result["test"]: verdict["verdict"]
        for result in document.get("results", [])
        for name, verdict in result["verdicts"].items()
        if name == "time"
    }
    regressed = sorted(
        f"{r['test']} {name}"
        for r in document.get("results", [])
        for name, v in r["verdicts"].items()
        if v["verdict"] == "regressed"
    )
    against = document.get("against") or {}
    looks = against.get("looks") or []
    settled_at_cap = looks[-1][1] if looks else None
    benchmarks = len(times)
    return {
        "times": times,
        "regressed": regressed,
        "benchmarks": benchmarks,
        "pairs": against.get("pairs"),
        "unsettled": None if settled_at_cap is None else benchmarks - settled_at_cap,
        "pairs_seconds": against.get("seconds"),
    }


def run_plain(
    suite: dict[str, Any], base: Path, head: Path, folder: Path, out: Path
) -> dict[str, Any]:
    """The suite's own comparison: pytest-benchmark alone, base then head, each saving its
    JSON in ``out`` as the suite's CI does (pytest-hpml's plugin not loaded; 60 MB a side for
    tensordict's, so under --work)."""
    started, exits = time.monotonic(), []
    for side, python in (("base", base), ("head", head)):
        command = [
            str(python), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hpml", "-q",
            suite["run"], f"--benchmark-json={out / f'{side}.json'}", *suite.get("args", []),
        ]  # fmt: skip
        exits.append(_run(command, cwd=folder, env=_clean_env()).returncode)
    return {"exits": exits, "wall": round(time.monotonic() - started, 1)}


def known_caught(suite: dict[str, Any], times: dict[str, str]) -> list[dict[str, Any]]:
    """Each known change of the release pair: the benchmarks it names, and what the gate said
    of each."""
    found = []
    for known in suite.get("known", []):
        names = {
            test: verdict
            for test, verdict in times.items()
            if any(fnmatch.fnmatch(test.rpartition("::")[2], p) for p in known["benchmarks"])
        }
        caught = sum(v == known["verdict"] for v in names.values())
        found.append({**known, "said": names, "caught": caught, "of": len(names)})
    return found


def with_load(hogs: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(hogs)]


def stop(started: list[subprocess.Popen[bytes]]) -> None:
    for hog in started:
        hog.kill()
        hog.wait()


def run_suite(suite: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    out = args.out / "suites" / suite["name"]
    row: dict[str, Any] = {k: suite[k] for k in ("name", "library", "release", "base", "head")}
    try:
        release = side_python({**suite, "head": suite["release"]}, "head", args)
        folder = suite_files(suite, suite["revision"], args)
    except CaseError as exc:
        return {**row, "error": str(exc)}
    runs = []
    for number in range(1, args.runs + 1):
        hogs = args.hogs if number % 2 == 0 else 0
        where, raw = places(args, out, suite, f"unchanged-{number}")
        load = with_load(hogs)
        try:
            gate = run_gate(suite, release, None, folder, where, raw)
            timed = not args.plain_runs or number in args.plain_runs
            plain = run_plain(suite, release, release, folder, raw) if timed else None
        finally:
            stop(load)
        runs.append({"run": number, "hogs": hogs, "gate": gate, "plain": plain})
        print(f"{suite['name']} unchanged run {number}: {said(gate, plain, hogs)}", flush=True)
    row["unchanged"] = runs
    if args.pair:
        try:
            base, head = side_python(suite, "base", args), side_python(suite, "head", args)
            pair_folder = suite_files(suite, suite["pair_revision"], args)
        except CaseError as exc:
            return {**row, "pair_error": str(exc)}
        where, raw = places(args, out, suite, "release-pair")
        gate = run_gate(suite, head, base, pair_folder, where, raw)
        plain = run_plain(suite, base, head, pair_folder, raw)
        row["pair"] = {"gate": gate, "plain": plain, "known": known_caught(suite, gate["times"])}
        print(f"{suite['name']} release pair: {said(gate, plain, 0)}", flush=True)
    return row


def places(
    args: argparse.Namespace, out: Path, suite: dict[str, Any], run: str
) -> tuple[Path, Path]:
    """Where one run's log is kept (under --out) and its raw reports go (under --work)."""
    where, raw = out / run, args.work / "suite-runs" / suite["name"] / run
    for folder in (where, raw):
        folder.mkdir(parents=True, exist_ok=True)
    return where, raw


def said(gate: dict[str, Any], plain: dict[str, Any] | None, hogs: int) -> str:
    times = list(gate.get("times", {}).values())
    counts = {v: times.count(v) for v in sorted(set(times))}
    against = f" against {plain['wall']:.0f} s ({ratio(gate, plain)})" if plain else ""
    return (
        f"exit {gate['exit']}, times {counts}, unsettled {gate.get('unsettled')}, "
        f"{gate['wall']:.0f} s{against}, {hogs} hogs"
    )


def seconds(plain: dict[str, Any] | None) -> str:
    return f"{plain['wall']:.0f}" if plain else "-"


def ratio(gate: dict[str, Any], plain: dict[str, Any] | None) -> str:
    """The gate's wall time over the plain base-then-head run's, where both were timed."""
    return f"{gate['wall'] / plain['wall']:.2f}x" if plain and plain["wall"] else "-"


def table(rows: list[dict[str, Any]]) -> str:
    """The unchanged runs, one row each, then each release pair and its known changes."""
    lines = [
        "| suite | run | load | exit | benchmarks | regressed | improved | inconclusive | "
        "unsettled at the cap | gate s | base-then-head s | ratio |",
        "|" + "---|" * 12,
    ]
    for row in rows:
        for run in row.get("unchanged", []):
            gate, plain = run["gate"], run["plain"]
            times = list(gate.get("times", {}).values())
            load = f"{run['hogs']} CPU hogs" if run["hogs"] else "none"
            lines.append(
                f"| {row['name']} {row['release']} | {run['run']} | {load} | {gate['exit']} | "
                f"{gate.get('benchmarks', '-')} | {times.count('regressed')} | "
                f"{times.count('improved')} | {times.count('inconclusive')} | "
                f"{gate.get('unsettled', '-')} | {gate['wall']:.0f} | "
                f"{seconds(plain)} | {ratio(gate, plain)} |"
            )
    lines.append("")
    for row in rows:
        pair = row.get("pair")
        if not pair:
            continue
        gate = pair["gate"]
        times = list(gate.get("times", {}).values())
        counts = ", ".join(f"{times.count(v)} {v}" for v in sorted(set(times)))
        lines.append(
            f"- {row['name']} {row['base']} -> {row['head']}: exit {gate['exit']}; times: "
            f"{counts}; {gate['wall']:.0f} s against {seconds(pair.get('plain'))} s base-then-head"
        )
        for known in pair["known"]:
            lines.append(
                f"  - known {known['verdict']} ({known['source']}): {known['caught']} of "
                f"{known['of']} benchmarks {known['verdict']}"
            )
        for name in gate.get("regressed", []):
            lines.append(f"  - regressed: {name}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="suite names (folders) to run")
    parser.add_argument("--suites", type=Path, default=SUITES)
    parser.add_argument("--work", type=Path, default=ROOT / ".validate")
    parser.add_argument("--out", type=Path, default=ROOT / "validation" / "results")
    parser.add_argument("--wheels", type=Path, help="install the sides from these wheels, offline")
    parser.add_argument("--side", action="append", default=[], metavar="LIB==VERSION=PYTHON")
    parser.add_argument(
        "--source", action="append", default=[], metavar="NAME=DIR",
        help="the suite's repository here (a checkout or a bare clone) instead of cloning it",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=10, help="unchanged runs of each suite")
    parser.add_argument("--hogs", type=int, default=2, help="CPU hogs beside every second run")
    parser.add_argument(
        "--plain-runs", type=int, nargs="*", default=[], metavar="N",
        help="the unchanged runs also timed base-then-head without the gate (default: all)",
    )  # fmt: skip
    parser.add_argument("--no-pair", dest="pair", action="store_false", help="skip the releases")
    parser.add_argument("--render", action="store_true", help="the table again, running nothing")
    args = parser.parse_args(argv)
    args.work, args.out = args.work.resolve(), args.out.resolve()
    args.instructions, args.benchmark, args.hpml = False, True, []  # what validate's helpers read
    results = args.out / "suites.json"
    if args.render:
        rows = json.loads(results.read_text())["suites"]
    else:
        folders = sorted(p for p in args.suites.iterdir() if (p / "suite.toml").exists())
        if args.only:
            folders = [p for p in folders if p.name in args.only]
        try:
            suites = [load_suite(p) for p in folders]
        except CaseError as exc:
            parser.error(str(exc))
        started = time.monotonic()
        rows = [run_suite(suite, args) for suite in suites]
        args.out.mkdir(parents=True, exist_ok=True)
        document = {"wall": round(time.monotonic() - started, 1), "suites": rows}
        results.write_text(json.dumps(document, indent=1, default=str) + "\n")
    (args.out / "suites.md").write_text(table(rows))
    print(table(rows))
    return 1 if any("error" in r or "pair_error" in r for r in rows) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
