"""The official DCAT-AP 3.0.1 shapes (SEMIC's ``shapes.ttl`` + ``range.ttl``), read from
``../shared/reference/`` beside the repository, for tests that judge our output as a
downstream validator would: the data graph alone, no background knowledge (the Interoperability
Test Bed's "Base0 + Range0").

The files are never copied into the project. Where they are absent, :func:`require_shapes`
skips the test with the reason. One reading of the files: they write ``sh:shape`` where
``sh:node`` is meant (``sh:shape`` is no SHACL term, so the date and period checks it names
would never run); it is read as ``sh:node``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
SHAPES_DIR = REFERENCE / "dcat-ap-3.0.1-shacl"
DEV_SET = REFERENCE / "geodcat-ap-dev"

#: links to a resource another record describes (its class cannot be stated inside this one)
CROSS_RECORD = frozenset(
    {
        "http://www.w3.org/ns/dcat#servesDataset",
        "http://www.w3.org/ns/dcat#inSeries",
        "http://www.w3.org/ns/dcat#seriesMember",
        "http://purl.org/dc/terms/isPartOf",
    }
)


@dataclass(frozen=True)
class Violation:
    focus: str
    path: str
    value: str
    message: str

    def __str__(self) -> str:
        return f"{self.focus} {self.path} {self.value!r}: {self.message}"


def require_shapes() -> None:
    """Skip the calling test when the official shape files are not beside the repository."""
    if not (SHAPES_DIR / "shapes.ttl").is_file() or not (SHAPES_DIR / "range.ttl").is_file():
        pytest.skip(f"the official DCAT-AP 3.0.1 shapes are not at {SHAPES_DIR}")


@lru_cache(maxsize=2)
def _shapes(with_range: bool):  # type: ignore[no-untyped-def]
    import rdflib
    from rdflib.namespace import SH

    g = rdflib.Graph()
    for name in ("shapes.ttl", "range.ttl") if with_range else ("shapes.ttl",):
        g.parse(SHAPES_DIR / name, format="turtle")
    sh_shape = rdflib.URIRef(str(SH) + "shape")
    for s, o in list(g.subject_objects(sh_shape)):
        g.remove((s, sh_shape, o))
        g.add((s, SH.node, o))
    return g


def official_violations(
    data: str | bytes, rdf_format: str = "nt", *, with_range: bool = True
) -> list[Violation]:
    """The Violation results of the official shapes on ``data`` (N-Triples by default), except
    range results on cross-record links to IRIs the data does not describe."""
    import pyshacl
    import rdflib
    from rdflib.namespace import SH

    require_shapes()
    g = rdflib.Graph()
    g.parse(data=data, format=rdf_format)
    _, report, _ = pyshacl.validate(
        g,
        shacl_graph=_shapes(with_range),
        inference="none",
        advanced=True,
        allow_warnings=True,
    )
    found = []
    for result in report.subjects(SH.resultSeverity, SH.Violation):
        path, value = report.value(result, SH.resultPath), report.value(result, SH.value)
        if (
            str(path) in CROSS_RECORD
            and isinstance(value, rdflib.URIRef)
            and (value, None, None) not in g
        ):
            continue
        found.append(
            Violation(
                focus=str(report.value(result, SH.focusNode)),
                path=str(path),
                value=str(value),
                message=str(report.value(result, SH.resultMessage)),
            )
        )
    return sorted(found, key=str)
