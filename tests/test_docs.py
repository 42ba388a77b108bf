"""The README and the documentation site say what the code does: the reference is generated
from the code's registry and matches ``pytest --help``; no page names an option, ini key,
environment variable or marker the code does not have."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from pytest_hpml.config.markers import MARKERS
from pytest_hpml.config.options import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.yml")]
)


def hooks():
    """docs/hooks.py, the MkDocs hook that writes the reference tables (not a package)."""
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_generated_options_table_is_the_registry_and_pytest_help(
    pytester: pytest.Pytester,
) -> None:
    rows = [line for line in hooks().options_table().splitlines() if line.startswith("| `--")]
    assert len(rows) == len(OPTIONS)
    shown = words(pytester.runpytest("--help").stdout.str())
    for opt, row in zip(OPTIONS, rows):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[:3] == [f"`{opt.cli}`", f"`{opt.ini}`", f"`{opt.env}`"], row
        assert opt.cli in shown
        assert words(opt.summary) in shown, f"{opt.cli}'s summary is not what pytest --help prints"


def test_the_generated_markers_table_lists_every_registered_marker() -> None:
    table = hooks().markers_table()
    for name in MARKERS:
        assert f"`{name}" in table or f"@pytest.mark.{name}" in table, name


# Names the pages may mention that are not options: the rerun channel's former name and a
# typo, which notes tell of; and the variables pytest-hpml sets for its own processes.
NOT_OPTIONS = {"HPML_RERUN", "HPML_TRESHOLD"} | {
    name
    for path in (ROOT / "pytest_hpml").rglob("*.py")
    for name in re.findall(r'"(HPML_[A-Z_]+)"', path.read_text(encoding="utf-8"))
}


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_a_page_names_only_options_the_code_has(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    named_as = [o for o in OPTIONS] + [o.former for o in OPTIONS if o.former]  # old names too
    known = {o.cli for o in named_as} | {o.ini for o in named_as} | {o.env for o in named_as}
    named = set(re.findall(r"--hpml-[a-z][a-z-]*[a-z]", text))
    named |= set(re.findall(r"\bhpml_(?!bench\b)[a-z][a-z_]*[a-z]\b", text)) - {"hpml_seed"}
    named |= set(re.findall(r"\bHPML_[A-Z][A-Z_]*[A-Z]\b", text))
    assert sorted(named - known - NOT_OPTIONS) == []


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_ci_runs_the_readmes_test_command() -> None:
    """What .ci/run runs is the README's test command, line for line, not a paraphrase."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line for line in run if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == ["python3 -m pip install tox && python3 -m tox -e lint,docs,build,tests"]
    quickstart = readme.index("## Quickstart")
    first = readme.index("```bash", quickstart)  # the Quickstart's first command is CI's
    assert readme[first + 1] == commands[0]


def test_each_note_states_its_rule_in_at_most_15_lines() -> None:
    """A note states the rule the code follows; the evidence behind it is in the design log
    (docs/design/log.md). The notes had grown to 19,900 words of measurements and history."""
    text = (ROOT / "docs" / "notes.md").read_text(encoding="utf-8")
    assert len(text.split()) <= 6000
    notes = re.split(r"(?m)^(?=## Note \[)", text)[1:]
    assert len(notes) > 40
    long = {}
    for note in notes:
        lines = [line for line in note.splitlines()[1:] if line.strip()]
        body = lines[_cited_lines(lines) :]
        if len(body) > 15:
            long[note.splitlines()[0]] = len(body)
    assert long == {}


def _cited_lines(lines: list[str]) -> int:
    """How many of a note's first lines are its ``Cited by ...`` sentence."""
    if not lines or not lines[0].startswith("Cited by"):
        return 0
    return next(i + 1 for i, line in enumerate(lines) if line.rstrip().endswith("."))
