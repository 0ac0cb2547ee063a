"""Comments and docstrings keep the why; measured figures live in docs/benchmarks.md (issue 29).

A figure in a comment (``~235 -> ~70 us``, ``20x slower``, ``~15 s of CPU at 100,000
records``) goes stale as soon as the code or the machine changes, and nothing tells. The code
says why it does what it does and points to the section of docs/benchmarks.md that holds the
figure and the command that measures it again.

Two checks, read from the source with :mod:`tokenize` (comments and docstrings only, never
code or messages):

- no comment or docstring of ``aggregator/`` carries a measured figure, except in the modules
  of :data:`PENDING` (figures not moved yet; an entry whose figures are gone fails the test,
  so the list only shrinks);
- every ``docs/<page>.md#<anchor>`` a comment points to names a heading of that page.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "aggregator"

#: A measured figure: a time per something (``8 us``, ``~0.3-0.5 ms``), a speed-up
#: (``20x slower``, ``3x cheaper``), an approximate share (``~13 %``), a cost "at N records",
#: or an approximate CPU time or memory taken.
FIGURE = re.compile(
    r"(?<![\w.])~?\s?\d[\d.,]*(?:-\d[\d.,]*)?\s?(?:us|µs|ms)\b"
    r"|\b\d+(?:-\d+)?\s?x\s+(?:slower|faster|cheaper|dearer|less|more)\b"
    r"|~\s?\d[\d.,]*\s?%"
    r"|\bat\s+\d[\d,]*\s+(?:records|documents|sources)\b"
    r"|~\s?\d[\d.,]*\s?(?:s|MB|MiB|GB)\s+(?:of\s+CPU|more\s+RSS)\b"
)

#: Modules other changes of issue 29 are editing still hold figures: move them to
#: docs/benchmarks.md, then remove the entry (never add one).
PENDING: set[str] = set()

POINTER = re.compile(r"docs/([\w/.-]+\.md)#([\w-]+)")


def _prose(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment and docstring-like string of a module."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
        elif tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            for offset, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + offset, line


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path


def figures_in(source: str) -> list[tuple[int, str]]:
    return [(n, text.strip()) for n, text in _prose(source) if FIGURE.search(text)]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {
        _slug(m[1])
        for m in re.finditer(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    }


def test_the_figure_pattern_finds_figures_and_not_settings() -> None:
    assert figures_in("x = 1  # strftime costs 8 us\n")
    assert figures_in('"""pySHACL: the reference, ~100x slower."""\n')
    assert figures_in("# a pass costs ~15 s of CPU at 100,000 records\n")
    assert figures_in("# took ~13 % of the CPU\n")
    assert not figures_in("x = 1  # 32 MB: lookups stay off the disk\n")
    assert not figures_in("x = 300.0  # seconds\n")
    assert not figures_in('msg = "took ~40 ms"\n')  # a message, not a comment


def test_comments_carry_no_measured_figures() -> None:
    found = {
        name: hits
        for name, path in _modules()
        if (hits := figures_in(path.read_text(encoding="utf-8")))
    }
    stray = {name: hits for name, hits in found.items() if name not in PENDING}
    assert not stray, (
        f"measured figures in comments: move them to docs/benchmarks.md and point there: {stray}"
    )
    moved = PENDING - set(found)
    assert not moved, f"no figures left in {sorted(moved)}: remove them from PENDING"


def test_pointers_from_the_code_name_a_heading() -> None:
    pointers = 0
    for name, path in _modules():
        for line, text in _prose(path.read_text(encoding="utf-8")):
            for page, anchor in POINTER.findall(text):
                pointers += 1
                target = ROOT / "docs" / page
                assert target.exists(), f"{name}:{line}: no docs/{page}"
                assert anchor in anchors(target), f"{name}:{line}: no #{anchor} in docs/{page}"
    assert pointers  # the figures' reasons point somewhere
