"""MkDocs hooks of the documentation site: the reference tables are generated from the code.

A page asks for a table with a placeholder on a line of its own::

    <!-- hpml:options -->                          every option (--hpml-*, hpml_*, HPML_*)
    <!-- hpml:options group=benchmarks -->         --hpml-benchmarks and the options that opt in
    <!-- hpml:options group=tests -->              the others: devices, precisions, ranks, ...
    <!-- hpml:options max-ranks dist-timeout -->   these options, in this order
    <!-- hpml:markers -->                          every marker (or: hpml:markers hpml_bench)
    <!-- hpml:fixtures -->                         the fixtures, benchmark included
    <!-- hpml:benchmark -->                        what the benchmark fixture adds

Sources: ``pytest_hpml.config.options.OPTIONS`` and ``resolution.BENCHMARK_OPTIONS``,
``pytest_hpml.config.markers.MARKERS`` (imported: neither imports torch), and the fixture
modules ``pytest_hpml/fixtures/fixtures.py``, ``pytest_hpml/bench/fixture.py`` and
``pytest_hpml/bench/benchmark.py``, read with :mod:`ast` (importing them would import torch).
Each table is one function returning Markdown (``options_table()``, ``markers_table()``,
``fixtures_table()``, ``benchmark_table()``), callable from a test. A placeholder that names an
unknown table, option or marker fails the build.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_hpml"
FIXTURE_SOURCES = (PACKAGE / "fixtures" / "fixtures.py", PACKAGE / "bench" / "fixture.py")
BENCHMARK_SOURCE = PACKAGE / "bench" / "benchmark.py"
BENCHMARK_CLASS = "HpmlBenchmark"

PLACEHOLDER = re.compile(r"^<!--\s*hpml:(?P<kind>[\w-]+)(?P<args>[^>]*?)\s*-->[ \t]*$", re.M)
_CODE = re.compile(r"(`+)(.+?)\1", re.S)  # a Markdown code span
_ROLE = re.compile(r":[\w:]+:`~?([^`]+)`")  # reST: :class:`~pytest_hpml.x.Precision`
_NOTE = re.compile(r"Note \[([^\]\n]+)\]")  # docs/notes.md, ## Note [Name]
_SPECIAL = re.compile(r"([\\*_\[\]>|])")  # what Markdown would read as markup


class PlaceholderError(ValueError):
    """A placeholder that names no table, or an option or marker the code does not have."""


# --- Markdown of a table cell ------------------------------------------------------------------


def cell(text: str, page_dir: str | None = "") -> str:
    """One table cell from a help text or docstring: reST roles and ``double backticks`` become
    code spans, paragraphs are joined with ``<br>``, text outside code spans is escaped (``|``
    included), and ``Note [Name]`` links to docs/notes.md where ``page_dir`` (the page's
    folder, relative to docs/) is given."""
    text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = text.replace("``", "`")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return "<br>".join(_inline(p, page_dir) for p in paragraphs if p)


def _inline(text: str, page_dir: str | None) -> str:
    out, end = [], 0
    for match in _CODE.finditer(text):
        out.append(_escape(text[end : match.start()], page_dir))
        out.append(f"`{match.group(2).strip()}`")  # a pipe inside a code span splits no cell
        end = match.end()
    out.append(_escape(text[end:], page_dir))
    return "".join(out)


def _escape(text: str, page_dir: str | None) -> str:
    out, end = [], 0
    for match in _NOTE.finditer(text) if page_dir is not None else ():
        out.append(_plain(text[end : match.start()]))
        name = match.group(1)
        out.append(f"[{_plain(match.group(0))}]({note_link(name, page_dir)})")
        end = match.end()
    out.append(_plain(text[end:]))
    return "".join(out)


def _plain(text: str) -> str:
    """Text that Markdown shows as it is: markup characters escaped (``|`` too: the tables
    extension makes it escapable), ``<`` as an entity (no backslash escapes it)."""
    return _SPECIAL.sub(r"\\\1", text).replace("<", "&lt;")


def note_link(name: str, page_dir: str = "") -> str:
    """The link from a page in ``page_dir`` to ``## Note [name]`` of docs/notes.md."""
    # Python-Markdown's toc slug, written out so that the tables need no Markdown installed
    # (the tests build them); `mkdocs build --strict` checks every anchor it makes.
    words = re.sub(r"[^\w\s-]", "", f"Note [{name}]").strip().lower()
    anchor = re.sub(r"[-\s]+", "-", words)
    return f"{posixpath.relpath('notes.md', page_dir or '.')}#{anchor}"


def code(text: str) -> str:
    return f"`{text}`"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- options -----------------------------------------------------------------------------------


def _options() -> Any:
    from pytest_hpml.config import options

    return options


def _resolution() -> Any:
    from pytest_hpml.config import resolution

    return resolution


def option_names(group: str | None = None) -> list[str]:
    """The options' names (``device``, ``max-ranks``, ...), in the code's order; ``group``:
    ``benchmarks`` (--hpml-benchmarks and the options that opt a run in) or ``tests`` (the
    rest)."""
    options = _options()
    bench = {"benchmarks", *_resolution().BENCHMARK_OPTIONS}
    if group not in (None, "benchmarks", "tests"):
        raise PlaceholderError(f"unknown option group {group!r}: benchmarks or tests")
    return [
        opt.name
        for opt in options.OPTIONS
        if group is None or (opt.dest in bench) == (group == "benchmarks")
    ]


def _default(opt: Any) -> str:
    if opt.flag:
        return "on" if opt.parse(opt.default) else "off"
    return code(opt.default) if opt.default != "" else "(unset)"


def _meaning(opt: Any) -> str:
    """The option's help, and its old name where it was renamed (Note [Renamed])."""
    if opt.former is None:
        return opt.help
    old = opt.former
    return (
        f"{opt.help}. Formerly ``{old.cli}`` (ini ``{old.ini}``, ``{old.env}``), read until 0.2 "
        "with a deprecation warning (Note [Renamed])"
    )


def options_table(names: Sequence[str] | None = None, page_dir: str = "") -> str:
    """option | ini key | environment variable | default | meaning, from ``OPTIONS``."""
    by_name = {opt.name: opt for opt in _options().OPTIONS}
    unknown = [n for n in names or () if n not in by_name]
    if unknown:
        raise PlaceholderError(f"no option {', '.join(unknown)}; options: {', '.join(by_name)}")
    chosen = [by_name[n] for n in names] if names else list(by_name.values())
    rows = (
        [code(o.cli), code(o.ini), code(o.env), _default(o), cell(_meaning(o), page_dir)]
        for o in chosen
    )
    return table(["option", "ini key", "environment variable", "default", "meaning"], rows)


# --- markers -----------------------------------------------------------------------------------


def markers_table(names: Sequence[str] | None = None, page_dir: str = "") -> str:
    """marker | effect, from ``MARKERS`` (name -> ``signature: description``), as registered."""
    from pytest_hpml.config.markers import MARKERS

    unknown = [n for n in names or () if n not in MARKERS]
    if unknown:
        raise PlaceholderError(f"no marker {', '.join(unknown)}; markers: {', '.join(MARKERS)}")
    rows = []
    for name in names or MARKERS:
        signature, _, effect = MARKERS[name].partition(": ")
        rows.append([code(f"@pytest.mark.{signature}"), cell(effect, page_dir)])
    return table(["marker", "effect"], rows)


# --- fixtures, read from their source ----------------------------------------------------------


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in ("pytest.fixture", "fixture")


def _tuple_of(tree: ast.Module, name: str) -> tuple[str, ...]:
    """A module-level tuple of strings (``PARAMETRIZED = ("device", ...)``), or ()."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return ()
            return tuple(v for v in value if isinstance(v, str))
    return ()


def fixtures() -> list[tuple[str, str, bool, str]]:
    """(name, docstring, parametrized, module) of every public fixture, in source order."""
    found = []
    for path in FIXTURE_SOURCES:
        tree = _tree(path)
        parametrized = set(_tuple_of(tree, "PARAMETRIZED"))
        module = path.relative_to(ROOT).as_posix()
        for node in tree.body:
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and not node.name.startswith("_")
                and any(_is_fixture(d) for d in node.decorator_list)
            ):
                doc = ast.get_docstring(node) or ""
                found.append((node.name, doc, node.name in parametrized, module))
    return found


def fixtures_table(page_dir: str = "") -> str:
    """fixture | parametrized | value, from the fixture functions' docstrings."""
    rows = (
        [code(name), "yes" if parametrized else "", cell(doc, page_dir) or "(undocumented)"]
        for name, doc, parametrized, _ in fixtures()
    )
    return table(["fixture", "parametrized", "value"], rows)


def _plumbing() -> set[str]:
    """Methods the fixture itself calls on the benchmark object (``HpmlBenchmark.adopt(...)``,
    ``value.settle()``): how it is made and finished, not what a test calls."""
    tree = _tree(PACKAGE / "bench" / "fixture.py")
    names = {BENCHMARK_CLASS}
    for node in ast.walk(tree):  # value = HpmlBenchmark.adopt(...)
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == BENCHMARK_CLASS
        ):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in names
    }


def _signature(node: ast.FunctionDef) -> str:
    args = node.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None:
            arg.annotation = None
    positional = args.posonlyargs or args.args
    if positional and positional[0].arg == "self":
        positional.pop(0)
        if len(args.defaults) > len(args.posonlyargs) + len(args.args):
            args.defaults.pop(0)
    return ast.unparse(args)


def benchmark_methods() -> list[tuple[str, str]]:
    """(call, docstring) of what a test calls on ``benchmark``: the public, documented methods
    of ``HpmlBenchmark`` in source order, ``__call__`` first (as ``benchmark(...)``)."""
    tree = _tree(BENCHMARK_SOURCE)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == BENCHMARK_CLASS]
    if not classes:
        raise PlaceholderError(f"no class {BENCHMARK_CLASS} in {BENCHMARK_SOURCE}")
    plumbing = _plumbing()
    found = []
    for node in classes[0].body:
        if not isinstance(node, ast.FunctionDef) or node.name in plumbing:
            continue
        decorators = {ast.unparse(d) for d in node.decorator_list}
        if decorators & {"classmethod", "staticmethod", "property"}:
            continue
        doc = ast.get_docstring(node)
        if node.name == "__call__" and doc:
            found.insert(0, (f"benchmark({_signature(node)})", doc))
        elif not node.name.startswith("_") and doc:
            found.append((f"benchmark.{node.name}({_signature(node)})", doc))
    return found


def benchmark_table(page_dir: str = "") -> str:
    """call | what it does, for the ``benchmark`` fixture of pytest-hpml."""
    rows = ([code(call), cell(doc, page_dir)] for call, doc in benchmark_methods())
    return table(["call", "what it does"], rows)


# --- the hook ----------------------------------------------------------------------------------


def render(kind: str, args: Sequence[str], page_dir: str = "") -> str:
    """The Markdown of one placeholder."""
    if kind == "options":
        groups = [a.partition("=")[2] for a in args if a.startswith("group=")]
        names = [a for a in args if not a.startswith("group=")]
        if groups:
            names += option_names(groups[0])
        return options_table(names or None, page_dir)
    if kind == "markers":
        return markers_table(list(args) or None, page_dir)
    if kind == "fixtures" and not args:
        return fixtures_table(page_dir)
    if kind == "benchmark" and not args:
        return benchmark_table(page_dir)
    raise PlaceholderError(f"unknown placeholder hpml:{kind} {' '.join(args)}".strip())


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    page_dir = posixpath.dirname(page.file.src_uri)

    def replace(match: re.Match[str]) -> str:
        try:
            return render(match.group("kind"), match.group("args").split(), page_dir)
        except PlaceholderError as exc:
            from mkdocs.exceptions import PluginError

            raise PluginError(f"{page.file.src_uri}: {exc}") from None

    return PLACEHOLDER.sub(replace, markdown)
