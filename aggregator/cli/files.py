"""``aggregator map`` and ``aggregator validate``: map or validate a file, no store needed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from aggregator.cli.context import Ctx, pass_ctx


def _raw_from_file(path: Path, fmt: str, media_type: str | None, collection: bool = True) -> Any:
    from aggregator.core.models import RawRecord

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
        is_collection=collection,
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


_PRIMARY_TOPIC = "http://xmlns.com/foaf/0.1/primaryTopic"
_IS_PRIMARY_TOPIC_OF = "http://xmlns.com/foaf/0.1/isPrimaryTopicOf"


def catalogue_record(catalog_ntriples: bytes, dataset_iri: str) -> bytes:
    """The catalogue record(s) about ``dataset_iri`` among a mapped dataset's catalogue facts
    (what the store keeps beside the dataset): each ``dcat:CatalogRecord`` whose
    ``foaf:primaryTopic`` is the dataset, the nodes it reaches (contacts, standards, the
    classes of its values), and the dataset's
    ``foaf:isPrimaryTopicOf`` links. The rest of the catalogue facts (the source's
    ``dcat:Catalog`` of an RDF document) is not printed."""
    from pyoxigraph import NamedNode, RdfFormat, parse, serialize

    triples = list(parse(catalog_ntriples, format=RdfFormat.N_TRIPLES))
    dataset = NamedNode(dataset_iri)
    reached: set[Any] = {
        t.subject for t in triples if t.predicate.value == _PRIMARY_TOPIC and t.object == dataset
    }
    reached |= {
        t.object
        for t in triples
        if t.subject == dataset and t.predicate.value == _IS_PRIMARY_TOPIC_OF
    }
    by_subject: dict[Any, list[Any]] = {}
    for t in triples:
        by_subject.setdefault(t.subject, []).append(t)
    todo = list(reached)
    while todo:  # what the records say, and what the facts say of their values (classes...)
        for t in by_subject.get(todo.pop(), ()):
            if t.object not in reached and t.object != dataset and t.object in by_subject:
                reached.add(t.object)
                todo.append(t.object)
    kept = [
        t
        for t in triples
        if t.subject in reached
        or (t.subject == dataset and t.predicate.value == _IS_PRIMARY_TOPIC_OF)
    ]
    return serialize(kept, format=RdfFormat.N_TRIPLES) or b""


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

    Each dataset comes with the catalogue record about it that the mapping made (the
    ``dcat:CatalogRecord`` the store keeps beside the dataset, e.g. an ISO record's metadata
    date, language and standard).

    All datasets go into one document; the blank nodes of each dataset get their own labels
    (``_:d1_c14n0``...), so that no two datasets share one. The mapping findings are printed
    as comments in Turtle, N-Triples, TriG and N-Quads, on standard error otherwise.
    """
    from pyoxigraph import NamedNode, RdfFormat, serialize

    from aggregator.mapping.base import MappingContext
    from aggregator.mapping.finish import finish_mapped
    from aggregator.plugin import mappers

    mapper = mappers.get(fmt)()
    # a file of a format that describes one dataset is one record, within the input limits
    raw = _raw_from_file(file, fmt, media_type, collection=mapper.reads_collections)
    ctx = MappingContext(base_iri=base_iri, source="file")
    datasets = finish_mapped(mapper.map(raw, ctx), ctx)  # as a harvest does after the mapper
    rdf_format = getattr(RdfFormat, MAP_SYNTAXES[syntax][0])
    graphs = MAP_SYNTAXES[syntax][1]
    comments = syntax in _COMMENTS
    blocks: list[tuple[list[str], list[Any]]] = []
    for number, ds in enumerate(datasets, start=1):
        notes = [f"dataset {ds.dataset_iri} (record {ds.local_id})"]
        notes.extend(f"{f.severity.value} {f.rule}: {f.message}" for f in ds.findings)
        graph = NamedNode(ds.dataset_iri) if graphs else None
        quads = scoped_quads(ds.ntriples, f"d{number}", graph)
        if ds.catalog_ntriples:  # the catalogue record, as the store keeps it beside the dataset
            record = catalogue_record(ds.catalog_ntriples, ds.dataset_iri)
            quads += scoped_quads(record, f"r{number}", graph)
        blocks.append((notes, quads))
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


def _print_findings(findings: Any) -> tuple[int, int]:
    """Findings grouped by focus node (``# <node>`` then one line each); (violations, warnings)."""
    from aggregator.core.models import Severity

    shown = [f for f in findings if f.severity is not Severity.INFO]
    shown.sort(key=lambda f: (f.location or "", f.severity is not Severity.VIOLATION, f.path or ""))
    focus: str | None = None
    for f in shown:
        if f.location != focus:
            focus = f.location
            click.echo(f"# {focus or '(document)'}")
        click.echo(f"{f.severity.value}\t{f.location or ''}\t{f.path or ''}\t{f.message}\t{f.rule}")
    violations = sum(1 for f in shown if f.severity is Severity.VIOLATION)
    return violations, len(shown) - violations


def _shacl_options(c: Ctx, vocabularies: bool) -> dict[str, Any]:
    """The [validation.shacl] options of aggregator.toml (when there is one); the class ranges
    (part of the default shapes) stay in for --vocabularies when the file replaces them."""
    from aggregator.validate.shacl import ranges_shapes

    options: dict[str, Any] = {}
    if c.config_path.exists() or c.config_given:  # a named file must exist
        options = dict(c.settings.validation.step("shacl").options)
    if vocabularies:
        extra = [str(p) for p in options.get("extra_shapes", ())]
        ranges = str(ranges_shapes())
        if ranges not in extra:
            extra.append(ranges)
        options["extra_shapes"] = tuple(extra)
    return options


def _validate_as_published(c: Ctx, raw: Any, vocabularies: bool) -> bool:
    """Validate the document's own graph, every node, before any mapping. True if it conforms."""
    from pyoxigraph import RdfFormat, serialize

    from aggregator.core.errors import AggregatorError
    from aggregator.mapping.dcat.input import parse_document
    from aggregator.validate.shacl import ShaclValidator
    from aggregator.validate.vocabulary_terms import vocabulary_triples

    try:
        parsed = parse_document(raw.payload, raw.media_type, raw.url)
    except AggregatorError as err:
        click.echo(f"violation\t\t\t{err.message}\t{err.code}")
        return False
    for node in parsed.dropped:
        click.echo(f"violation\t\t\tnot read: {node}\trdf-xml-node-unreadable")
    ntriples = serialize((q.triple for q in parsed.quads), format=RdfFormat.N_TRIPLES) or b""
    if vocabularies:
        ntriples += vocabulary_triples(ntriples)
    validator = ShaclValidator(**_shacl_options(c, vocabularies))
    report = validator.validate_ntriples(ntriples, f"the graph of {raw.url}")
    violations, warnings = _print_findings(report.findings)
    click.echo(f"# {len(parsed.quads)} triples, {violations} violation(s), {warnings} warning(s)")
    return violations == 0 and not parsed.dropped


@click.command()
@click.option(
    "--from",
    "fmt",
    default=None,
    help="Format key of FILE.  [default: the --source's format, else dcat]",
)
@click.option(
    "--normalised",
    is_flag=True,
    help="Validate the records FILE maps to, as a harvest does, instead of FILE as published.",
)
@click.option(
    "--profile",
    default=None,
    help="The validation chain a harvest runs (implies --normalised), as a source's "
    "`validation` names it: a profile (iso19139, gemini, none: its payload steps, then "
    "shacl) or validators and profiles, comma-separated (iso19139,shacl).  [default: the "
    "chain of a source of FILE's format that names none]",
)
@click.option(
    "--source",
    "source_name",
    default=None,
    help="Run the chain of this source of aggregator.toml (its steps, options, schema "
    "directories, lenient and publisher; implies --normalised).",
)
@click.option(
    "--vocabularies",
    is_flag=True,
    help="Describe the terms of the bundled vocabulary tables the graph uses (their class and "
    "label) beside it, as background knowledge; without it the class ranges are checked as "
    "the official shapes do, on the graph alone.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable output (with the chain only)."
)
@click.option("--media-type", default=None)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@pass_ctx
def validate(
    c: Ctx,
    fmt: str | None,
    normalised: bool,
    profile: str | None,
    source_name: str | None,
    vocabularies: bool,
    as_json: bool,
    media_type: str | None,
    file: Path,
) -> None:
    """Does FILE conform to DCAT-AP 3.0.1, or would a harvest store it? Print every finding.

    By default FILE's own graph is validated as published, before any mapping: every node
    the shapes target (catalogue, catalogue records, datasets, distributions, agents...).
    Findings are grouped by focus node (``# <node>``), one line each: severity, focus node,
    path, message, shape; exit 0 if FILE conforms, 1 if not. Shape files configured in
    aggregator.toml ([validation.shacl]) apply when it exists.

    ``--normalised``, ``--profile`` or ``--source`` run instead the chain a harvest runs on
    FILE as one record: the payload steps in order (XSD, Schematron; a failed step stops the
    later ones), the mapping, then the graph steps (SHACL) on each mapped dataset. Each step
    is printed with its status (passed, failed, error, not run) and findings (severity,
    step, rule, location, path, message), then the harvest's decision on each dataset and
    on FILE: ``stored`` (exit 0) or ``rejected`` (exit 1).
    """
    from functools import partial

    from aggregator.cli.harvest_check import validate_as_harvested

    if as_json and not (normalised or profile or source_name):
        raise click.UsageError("--json goes with --normalised, --profile or --source")
    if normalised or profile is not None or source_name is not None:
        raw_of = partial(_raw_from_file, media_type=media_type)
        stored = validate_as_harvested(
            c, raw_of, file, fmt, profile, source_name, vocabularies, as_json
        )
        sys.exit(0 if stored else 1)
    fmt = fmt or "dcat"
    if fmt != "dcat":
        raise click.UsageError(
            f"--from {fmt}: only RDF (--from dcat) can be validated as published; "
            "add --normalised to validate the mapped records"
        )
    raw = _raw_from_file(file, fmt, media_type)
    conforms = _validate_as_published(c, raw, vocabularies)
    click.echo("conforms" if conforms else "does not conform")
    sys.exit(0 if conforms else 1)
