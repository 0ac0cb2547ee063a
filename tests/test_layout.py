"""The layout a newcomer reads the architecture from (issue 29): small modules, and a format
family of several modules is one package.

- No module of ``aggregator/`` is much over 500 lines: one that grows past it is split along
  its concepts (as ``jobs/flow.py``, the threads and workers of a job, beside
  ``jobs/pipeline.py``, its wiring).
- In ``aggregator/harvest/``, modules told apart by a prefix (``x.py`` beside ``x_y.py``) are
  one family: it is a package ``x/`` (public face in ``__init__``, private helpers
  ``_y.py``), as ``csw/``, ``mdr/``, ``ckan/``, ``sparql/`` and ``oaipmh/`` are.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aggregator"

#: "about 500": a few lines over are not worth a split that does not follow a concept
MAX_LINES = 510

#: long modules in parts other issue-29 changes are editing: split them along their concepts,
#: then remove the entry (never add one)
PENDING_LONG: set[str] = set()

#: prefix families other issue-29 changes are turning into packages: remove the entry once
#: they are (never add one)
PENDING_FAMILIES: set[str] = set()


def long_modules(root: Path = PACKAGE) -> dict[str, int]:
    sizes = {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in root.rglob("*.py")
    }
    return {name: lines for name, lines in sizes.items() if lines > MAX_LINES}


def prefix_families(folder: Path) -> set[str]:
    """Names ``x`` of ``folder`` with a module ``x.py`` and another ``x_<something>.py``."""
    stems = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    return {stem for stem in stems if any(o.startswith(stem + "_") for o in stems - {stem})}


def test_no_module_is_much_over_500_lines() -> None:
    long = long_modules()
    stray = {name: lines for name, lines in long.items() if name not in PENDING_LONG}
    assert not stray, f"split these along their concepts: {stray}"
    done = PENDING_LONG - set(long)
    assert not done, f"{sorted(done)} are short now: remove them from PENDING_LONG"


def test_harvest_families_are_packages() -> None:
    families = prefix_families(PACKAGE / "harvest")
    assert families <= PENDING_FAMILIES, f"make these one package each: {families}"
    done = PENDING_FAMILIES - families
    assert not done, f"{sorted(done)} are packages now: remove them from PENDING_FAMILIES"
    for family in ("ckan", "csw", "mdr", "oaipmh", "sparql"):
        assert (PACKAGE / "harvest" / family / "__init__.py").is_file()


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1), encoding="utf-8")
    (tmp_path / "short.py").write_text("x = 1\n", encoding="utf-8")
    assert long_modules(tmp_path) == {"long.py": MAX_LINES + 1}
    for name in ("sparql.py", "sparql_closure.py", "base.py", "base_x.py", "_y.py", "_y_z.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    assert prefix_families(tmp_path) == {"sparql", "base"}
