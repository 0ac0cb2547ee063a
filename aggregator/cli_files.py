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


@click.command("map")
@click.option("--from", "fmt", required=True, help="Format key: dcat, iso19139, ckan, ...")
@click.option("--media-type", default=None, help="Override the media type of FILE.")
@click.option("--base-iri", default="http://localhost:8000/", show_default=True)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def map_file(fmt: str, media_type: str | None, base_iri: str, file: Path) -> None:
    """Map FILE to DCAT-AP 3 and print the normalised graph as Turtle (no store needed)."""
    from pyoxigraph import RdfFormat, parse, serialize

    from aggregator.mapping.base import MappingContext
    from aggregator.plugins import mappers

    raw = _raw_from_file(file, fmt, media_type)
    datasets = mappers.get(fmt)().map(raw, MappingContext(base_iri=base_iri, source="file"))
    prefixes = {
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
    for ds in datasets:
        triples = parse(ds.ntriples, format=RdfFormat.N_TRIPLES)
        out = serialize(triples, format=RdfFormat.TURTLE, prefixes=prefixes)
        assert out is not None
        click.echo(f"# dataset {ds.dataset_iri} (record {ds.local_id})")
        for f in ds.findings:
            click.echo(f"# {f.severity.value} {f.rule}: {f.message}")
        click.echo(out.decode())


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
