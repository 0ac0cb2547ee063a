"""``aggregator map`` and ``aggregator validate``: map or validate a file, no store needed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from aggregator.cli_context import Ctx, pass_ctx


def _raw_from_file(path: Path, fmt: str, media_type: str | None) -> Any:
    from aggregator.models import RawRecord

    guessed = {
        ".ttl": "text/turtle",
        ".rdf": "application/rdf+xml",
        ".owl": "application/rdf+xml",
        ".jsonld": "application/ld+json",
        ".nt": "application/n-triples",
        ".json": "application/json",
        ".xml": "application/xml",
    }.get(path.suffix.lower(), "application/octet-stream")
    return RawRecord(
        source="file",
        local_id=path.name,
        format=fmt,
        payload=path.read_bytes(),
        media_type=media_type or guessed,
        url=path.resolve().as_uri(),
        is_collection=True,
    )


#: output syntaxes of ``aggregator map``: option value -> (pyoxigraph format name, has graphs)
MAP_SYNTAXES: dict[str, tuple[str, bool]] = {
    "turtle": ("TURTLE", False),
    "ntriples": ("N_TRIPLES", False),
    "rdfxml": ("RDF_XML", False),
    "jsonld": ("JSON_LD", False),
    "trig": ("TRIG", True),
    "nquads": ("N_QUADS", True),
}
_COMMENTS = ("turtle", "ntriples", "trig", "nquads")  # syntaxes where '#' starts a comment
PREFIXES = {
    "dcat": "http://www.w3.org/ns/dcat#",
    "dct": "http://purl.org/dc/terms/",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "adms": "http://www.w3.org/ns/adms#",
    "locn": "http://www.w3.org/ns/locn#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
}


def scoped_quads(ntriples: bytes, scope: str, graph: Any = None) -> list[Any]:
    """The triples of one mapped dataset as quads whose blank nodes are renamed ``scope_label``.

    Every mapped dataset's canonical N-Triples label its blank nodes ``c14n0``, ``c14n1``...
    from zero: written side by side into one output, two datasets would share their blank
    nodes (a reader would join their distributions). A scope per dataset keeps them apart.
    """
    from pyoxigraph import BlankNode, DefaultGraph, Quad, RdfFormat, parse

    names: dict[str, BlankNode] = {}

    def rename(term: Any) -> Any:
        if isinstance(term, BlankNode):
            new = names.get(term.value)
            if new is None:
                new = names[term.value] = BlankNode(f"{scope}_{term.value}")
            return new
        return term

    graph_name = graph if graph is not None else DefaultGraph()
    return [
        Quad(rename(q.subject), q.predicate, rename(q.object), graph_name)
        for q in parse(ntriples, format=RdfFormat.N_TRIPLES)
    ]


@click.command("map")
@click.option("--from", "fmt", required=True, help="Format key: dcat, iso19139, ckan, ...")
@click.option("--media-type", default=None, help="Override the media type of FILE.")
@click.option("--base-iri", default="http://localhost:8000/", show_default=True)
@click.option(
    "--to",
    "syntax",
    type=click.Choice(list(MAP_SYNTAXES)),
    default="turtle",
    show_default=True,
    help="Output syntax. trig and nquads put each dataset in a named graph (its IRI).",
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def map_file(fmt: str, media_type: str | None, base_iri: str, syntax: str, file: Path) -> None:
    """Map FILE to DCAT-AP 3 and print the normalised graph (no store needed).

    All datasets go into one document; the blank nodes of each dataset get their own labels
    (``_:d1_c14n0``...), so that no two datasets share one. The mapping findings are printed
    as comments in Turtle, N-Triples, TriG and N-Quads, on standard error otherwise.
    """
    from pyoxigraph import NamedNode, RdfFormat, serialize

    from aggregator.mapping.base import MappingContext
    from aggregator.plugins import mappers

    raw = _raw_from_file(file, fmt, media_type)
    datasets = mappers.get(fmt)().map(raw, MappingContext(base_iri=base_iri, source="file"))
    rdf_format = getattr(RdfFormat, MAP_SYNTAXES[syntax][0])
    graphs = MAP_SYNTAXES[syntax][1]
    comments = syntax in _COMMENTS
    blocks: list[tuple[list[str], list[Any]]] = []
    for number, ds in enumerate(datasets, start=1):
        notes = [f"dataset {ds.dataset_iri} (record {ds.local_id})"]
        notes.extend(f"{f.severity.value} {f.rule}: {f.message}" for f in ds.findings)
        graph = NamedNode(ds.dataset_iri) if graphs else None
        blocks.append((notes, scoped_quads(ds.ntriples, f"d{number}", graph)))
    if not comments:  # one document: findings on stderr
        for notes, _quads in blocks:
            for note in notes:
                click.echo(f"# {note}", err=True)
        quads = [q for _notes, block in blocks for q in block]
        data = serialize(quads if graphs else [q.triple for q in quads], format=rdf_format)
        text = (data or b"").decode()
        click.echo(text, nl=not text.endswith("\n"))
        return
    prefixes = PREFIXES if syntax in ("turtle", "trig") else None
    if prefixes:
        click.echo("".join(f"@prefix {k}: <{v}> .\n" for k, v in prefixes.items()))
    for notes, quads in blocks:
        for note in notes:
            click.echo(f"# {note}")
        data = serialize(
            quads if graphs else [q.triple for q in quads], format=rdf_format, prefixes=prefixes
        )
        lines = (data or b"").decode().splitlines(keepends=True)
        click.echo("".join(line for line in lines if not line.startswith("@prefix ")))


@click.command()
@click.option("--from", "fmt", default="dcat", show_default=True, help="Format key of FILE.")
@click.option("--profile", default="shacl", show_default=True, help="Validators, comma-separated.")
@click.option("--media-type", default=None)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_ctx
def validate(c: Ctx, fmt: str, profile: str, media_type: str | None, file: Path) -> None:
    """Map FILE and validate it; print every finding. Exit 0 if it conforms, 1 if not.

    Shape files configured in aggregator.toml ([validation.shacl]) apply when it exists.
    """
    from aggregator.mapping.base import MappingContext
    from aggregator.models import Severity
    from aggregator.plugins import validators
    from aggregator.processing import process

    chain = [p.strip() for p in profile.split(",") if p.strip()]
    for name in chain:
        validators.get(name)
    raw = _raw_from_file(file, fmt, media_type)
    options = None
    if c.config_path.exists() or c.config_given:  # a named file must exist
        options = {name: c.settings.validation.for_validator(name) for name in chain}
    result = process(raw, MappingContext("http://localhost:8000/", "file"), chain, options)
    conforms = not result.failure
    for f in result.failure:
        click.echo(
            f"{f.severity.value}\t{f.stage.value}\t{f.rule}\t{f.location or ''}\t{f.message}"
        )
    for checked in result.checked:
        click.echo(f"# {checked.dataset.dataset_iri}")
        for f in checked.findings:
            if f.severity is Severity.INFO:
                continue
            where = f.location or ""
            path = f" {f.path}" if f.path else ""
            click.echo(f"{f.severity.value}\t{f.stage.value}\t{f.rule}\t{where}{path}\t{f.message}")
        conforms = conforms and checked.conforms
    click.echo("conforms" if conforms else "does not conform")
    sys.exit(0 if conforms else 1)
