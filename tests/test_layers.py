"""The package's layers: imports point one way, config -> hardware ->
fixtures/distributed/bench -> verdict -> run -> report, and no module imports itself back through
others.

Read from the source (every ``import`` statement, those inside functions and under
``TYPE_CHECKING`` included: a lazy import is still a dependency), so that a cycle hidden by an
import placed in a function is found too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_hpml

PACKAGE = Path(pytest_hpml.__file__).parent

# The rank of each top-level part of the package; a module may import only parts of lower
# rank, or modules of its own part. Parts of one rank do not import each other.
LAYERS = {
    "_compat": 0,  # private APIs of pytest, pytest-benchmark, torch
    "hookspecs": 0,
    "logs": 0,
    "storage": 0,  # the one reader and writer of files
    "vcs": 0,  # the one runner of git
    "model": 0,  # the typed results passed between the layers
    "config": 1,
    "hardware": 2,
    "fixtures": 3,
    "distributed": 3,
    "bench": 3,
    "verdict": 4,
    "helpers": 4,
    "run": 5,  # the end of a session: measures, judges, records; words from report
    "report": 6,
    "plugin": 7,
    "cli": 7,  # the pytest-hpml command
    "__init__": 7,
    "__main__": 8,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path, name: str) -> Iterator[str]:
    """The pytest_hpml modules ``path`` (module ``name``) imports, wherever the import is."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("pytest_hpml"))
        elif isinstance(node, ast.ImportFrom):
            origin = _origin(node, name, path)
            if not origin.startswith("pytest_hpml"):
                continue
            known = modules()
            for alias in node.names:
                candidate = f"{origin}.{alias.name}"
                yield candidate if candidate in known else origin


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph() -> dict[str, set[str]]:
    found = modules()
    return {
        name: {m for m in imported(path, name) if m != name and m in found}
        for name, path in found.items()
    }


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {part(m) for m in modules()}
    assert parts - set(LAYERS) == set()


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in sorted(targets)
        if part(target) != part(name)
        and LAYERS[part(target)] >= LAYERS[part(name)]
        and part(target) != "__init__"
    ]
    assert upward == []


def test_no_module_imports_itself_back() -> None:
    edges = graph()
    cycles = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(edges[node]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ..verdict import stats\n", "imports pytest_hpml.verdict.stats"),
        ("from pytest_hpml.report.text import fmt\n", "imports pytest_hpml.report.text"),
    ],
)
def test_the_layer_check_finds_an_upward_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: str
) -> None:
    """The checks can fail: an upward import planted in a copy of the package is found."""
    import shutil

    copy = tmp_path / "pytest_hpml"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / "bench" / "measure.py"
    planted.write_text(planted.read_text(encoding="utf-8") + "\n" + source, encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    with pytest.raises(AssertionError, match=expected):
        test_imports_point_down_the_layers()


def test_the_cycle_check_finds_a_lazy_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    copy = tmp_path / "pytest_hpml"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / "bench" / "metrics.py"
    text = planted.read_text(encoding="utf-8")
    planted.write_text(text + "\n\ndef _late():\n    from . import reruns\n", encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.PACKAGE", copy)
    with pytest.raises(AssertionError, match=r"metrics -> pytest_hpml.bench.reruns"):
        test_no_module_imports_itself_back()


def test_no_module_reaches_a_private_name_of_another_part() -> None:
    """A name with a leading underscore is its module's own business within its part of the
    package (``bench``, ``report``, ...): bisect had imported ``_git`` and ``_commit`` of
    ``bench.sides`` and called ``reruns._run``. ``_compat`` is the one place for private
    APIs of pytest, pytest-benchmark and torch, and may be reached from anywhere."""
    found = set()
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported_modules = {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            origin = _origin(node, name, path)
            if not origin.startswith("pytest_hpml"):
                continue
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                if full in modules():
                    imported_modules[alias.asname or alias.name] = full
                elif _private(alias.name) and part(origin) != part(name):
                    found.add((name, full))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                module = imported_modules.get(node.value.id)
                if module is None or not _private(node.attr) or part(module) == "_compat":
                    continue
                if part(module) != part(name):
                    found.add((name, f"{module}.{node.attr}"))
    assert found == set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _origin(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module an ``import from`` of module ``name`` (at ``path``) names, made absolute."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def test_every_note_the_code_cites_is_in_the_notes() -> None:
    """``Note [Name]`` in the code points to a ``## Note [Name]`` of docs/notes.md."""
    import re

    written = set(re.findall(r"^## Note \[([^]]+)\]", NOTES.read_text(), flags=re.M))
    cited = {
        (" ".join(name.replace("#", " ").split()), path.name)  # a name may wrap a comment line
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"Note \[([^]]+)\]", path.read_text(encoding="utf-8"))
    }
    assert {(name, where) for name, where in cited if name not in written} == set()


NOTES = Path(__file__).parents[1] / "docs" / "notes.md"  # the checkout's, wherever it is installed


# What starts a process: the standard library's ways, and the package's functions that call
# them (the reruns, the pairs, valgrind's processes, bisect's pytest runs).
PROCESS_MODULES = {"subprocess", "multiprocessing", "concurrent"}
PROCESS_CALLS = {"run_captured", "ask", "bisect", "measure_again", "measure_against"}
PROCESS_CALLS |= {"count_instructions", "start_early", "Popen", "fork", "spawn"}


def _uses(path: Path) -> tuple[set[str], set[str]]:
    """The top-level modules ``path`` imports, and every name and attribute it uses."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules_used, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules_used |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules_used.add(node.module.partition(".")[0])
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
    return modules_used, names


def test_verdicts_use_no_pytest_and_reports_start_no_process() -> None:
    """verdict/ is functions over records: it imports neither pytest (no config, no stash)
    nor a way to start a process; report/ renders what ``run/`` measured and starts none."""
    found = []
    for name, path in modules().items():
        used, names = _uses(path)
        if part(name) == "verdict":
            found += [f"{name} imports {m}" for m in sorted(used & {"pytest", *PROCESS_MODULES})]
        if part(name) == "report":
            found += [f"{name} imports {m}" for m in sorted(used & PROCESS_MODULES)]
            found += [f"{name} uses {n}" for n in sorted(names & PROCESS_CALLS)]
    assert found == []


MAX_LINES = 500  # a module a maintainer reads whole: split one that grows past it


def test_no_module_is_over_500_lines() -> None:
    """Each module stays small enough to read whole; a split keeps one role per module."""
    long = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
