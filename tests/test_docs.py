"""Docs that must stay true: the CLI reference, and a page for every protocol and mapping."""

from __future__ import annotations

from pathlib import Path

from aggregator.core.registry import Registry

DOCS = Path(__file__).parent.parent / "docs"


def test_cli_reference_is_current() -> None:
    from aggregator.cli.reference import render

    assert (DOCS / "cli.md").read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: run `python -m aggregator.cli.reference > docs/cli.md`"
    )


def test_every_protocol_and_mapping_has_a_page() -> None:
    # fresh registries: the installed plugins only, not what other tests registered
    harvesters: Registry[object] = Registry("aggregator.harvesters", "harvester")
    mappers: Registry[object] = Registry("aggregator.mappers", "mapper")
    protocol_pages = {p.stem for p in (DOCS / "protocols").glob("*.md")}
    for name in harvesters.names():
        assert name in protocol_pages, f"docs/protocols/{name}.md is missing"
    mapping_pages = {p.stem for p in (DOCS / "mappings").glob("*.md")}
    for name in mappers.names():
        assert name in mapping_pages, f"docs/mappings/{name}.md is missing"


def test_docs_links_resolve() -> None:
    import re

    for page in [*DOCS.rglob("*.md"), DOCS.parent / "README.md"]:
        for target in re.findall(
            r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")
        ):
            assert (page.parent / target).resolve().exists(), f"{page}: broken link {target}"
