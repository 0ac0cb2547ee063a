"""SHACL validation of mapped DCAT-AP 3 dataset graphs, one record at a time.

Each :class:`~aggregator.core.models.MappedDataset` is validated on its own graph (its canonical
N-Triples), never merged with other records: in a merged graph one record's vocabulary terms
get their types from another record and invalid records pass.

Usage::

    validator = ShaclValidator()                    # bundled DCAT-AP 3 shapes and their ranges
    validator = ShaclValidator(extra_shapes=["/etc/aggregator/dcat-ap-xx.ttl"])  # + a profile
    report = validator.validate_graph(dataset)
    report.conforms                     # False only if some finding is a Violation

Findings carry ``stage=Stage.SHACL``, the severity of the SHACL result, ``rule`` = the IRI of
the shape that raised it and the constraint component (``<shape IRI>|sh:MinCountConstraint
Component``), ``message`` = the shape's ``sh:message`` (or a generated one) plus the offending
value, ``location`` = the focus node (``[blank node]`` for blank nodes) and ``path`` = the
result path.

The validator is cheap to pickle: it pickles as its constructor arguments, and the compiled
shapes are kept in a per-process cache keyed by engine and shape files (name, size, mtime), so
a worker process compiles each shapes graph once however many times it unpickles a validator.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from aggregator.core.errors import ConfigError, ParseError
from aggregator.core.models import Finding, MappedDataset, Severity, Stage, ValidationReport
from aggregator.core.resources import data_dir
from aggregator.validate.base import Validator
from aggregator.validate.shacl_engines import (
    DEFAULT_ENGINE,
    ENGINES,
    SH,
    CompiledShapes,
    RawResult,
)

DEFAULT_SHAPES_FILE = "dcat-ap-3.ttl"
RANGES_SHAPES_FILE = "dcat-ap-3-ranges.ttl"

_SEVERITIES: dict[str, Severity] = {
    SH + "Violation": Severity.VIOLATION,
    SH + "Warning": Severity.WARNING,
    SH + "Info": Severity.INFO,
}
_SEVERITY_ORDER = {Severity.VIOLATION: 0, Severity.WARNING: 1, Severity.INFO: 2}


def shapes_dir() -> Path:
    """The directory of the bundled shape files (see :mod:`aggregator.core.resources`)."""
    return data_dir("shapes", DEFAULT_SHAPES_FILE)


def default_shapes() -> Path:
    """The bundled DCAT-AP 3.0.1 shapes, ``shapes/dcat-ap-3.ttl`` (without the ranges)."""
    return shapes_dir() / DEFAULT_SHAPES_FILE


def ranges_shapes() -> Path:
    """The bundled class ranges, ``shapes/dcat-ap-3-ranges.ttl`` (part of the default)."""
    return shapes_dir() / RANGES_SHAPES_FILE


def default_profile() -> list[Path]:
    """The shapes a validator uses when given none: the DCAT-AP 3.0.1 shapes and their class
    ranges, as the official shapes are shapes.ttl + range.ttl (see docs/validation.md)."""
    return [default_shapes(), ranges_shapes()]


def _file_key(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except OSError as err:
        raise ConfigError(f"cannot read SHACL shapes file {path}: {err.strerror}") from err
    return (str(path), st.st_size, st.st_mtime_ns)


def load_shapes_ntriples(paths: Sequence[Path]) -> str:
    """Merge shape files (any RDF syntax, by extension) into one graph, as N-Triples.

    Blank nodes are renamed per file so that two files cannot share one by accident.
    """
    from pyoxigraph import RdfFormat, parse, serialize

    triples: list[Any] = []
    for path in paths:
        fmt = RdfFormat.from_extension(path.suffix.lstrip(".")) if path.suffix else None
        if fmt is None:
            raise ConfigError(f"SHACL shapes file {path}: unknown RDF syntax (use .ttl or .nt)")
        try:
            triples.extend(q.triple for q in parse(path=path, format=fmt, rename_blank_nodes=True))
        except (SyntaxError, ValueError, OSError) as err:
            raise ConfigError(f"SHACL shapes file {path} cannot be read: {err}") from err
    text = serialize(triples, format=RdfFormat.N_TRIPLES)
    return text.decode() if isinstance(text, bytes) else (text or "")


@lru_cache(maxsize=16)
def _compiled(engine: str, files: tuple[tuple[str, int, int], ...]) -> CompiledShapes:
    """Compile once per process; keyed by file name, size and mtime (immutable values)."""
    shapes_nt = load_shapes_ntriples([Path(name) for name, _size, _mtime in files])
    try:
        return ENGINES[engine]().compile(shapes_nt)
    except (ValueError, SyntaxError) as err:
        names = ", ".join(name for name, _s, _m in files)
        raise ConfigError(f"SHACL shapes ({names}) cannot be compiled: {err}") from err


def _local(iri: str) -> str:
    return "sh:" + iri[len(SH) :] if iri.startswith(SH) else iri


def _finding(r: RawResult) -> Finding:
    component = _local(r.component)
    shape = r.source_shape or "(anonymous shape)"
    message = r.message
    if not message:
        where = f"property <{r.path}>" if r.path else "the node"
        message = f"Constraint {component} of shape <{shape}> is not met on {where}."
    if r.value is not None:
        message = f"{message} (value: {r.value})"
    return Finding(
        stage=Stage.SHACL,
        severity=_SEVERITIES.get(r.severity, Severity.VIOLATION),
        rule=f"{shape}|{component}",
        message=message,
        location=r.focus,
        path=r.path,
    )


def _sort_key(f: Finding) -> tuple[int, str, str, str, str]:
    return (_SEVERITY_ORDER[f.severity], f.location or "", f.path or "", f.rule, f.message)


@dataclass(frozen=True, slots=True)
class ShaclOptions:
    shapes: tuple[Path, ...] | None = None  # replace the bundled DCAT-AP 3 shapes
    extra_shapes: tuple[Path, ...] = ()  # add a profile (national, ranges) to the base shapes
    engine: str = DEFAULT_ENGINE

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            known = ", ".join(sorted(ENGINES))
            raise ValueError(f"unknown SHACL engine {self.engine!r} (known: {known})")


class ShaclValidator(Validator):
    """Validates each mapped dataset graph against DCAT-AP 3 shapes (plus operator profiles).

    ``shapes``: the base shape files; default: the bundled ``shapes/dcat-ap-3.ttl`` and
    ``shapes/dcat-ap-3-ranges.ttl`` (:func:`default_profile`).
    ``extra_shapes``: shape files an operator adds (a national profile); validated together
    with the base shapes as one shapes graph (a file given twice is read once).
    ``engine``: ``"shacl"`` (Rust, default) or ``"pyshacl"`` (reference).

    Raises :class:`ConfigError` at construction if a file is missing, unreadable or holds no
    shapes, or the engine is unknown.
    """

    name: ClassVar[str] = "shacl"
    target: ClassVar[Literal["payload", "graph"]] = "graph"
    Options: ClassVar[type[Any] | None] = ShaclOptions

    def __init__(
        self,
        shapes: Sequence[str | os.PathLike[str]] | None = None,
        extra_shapes: Sequence[str | os.PathLike[str]] = (),
        engine: str = DEFAULT_ENGINE,
    ) -> None:
        if engine not in ENGINES:
            known = ", ".join(sorted(ENGINES))
            raise ConfigError(f"unknown SHACL engine {engine!r} (known: {known})")
        base = default_profile() if shapes is None else [Path(p) for p in shapes]
        self.shape_files: tuple[Path, ...] = tuple(
            dict.fromkeys(p.resolve() for p in [*base, *(Path(p) for p in extra_shapes)])
        )
        if not self.shape_files:
            raise ConfigError("no SHACL shapes files given")
        self.engine = engine
        self._init_args = (
            None if shapes is None else tuple(str(p) for p in shapes),
            tuple(str(p) for p in extra_shapes),
            engine,
        )
        self._compiled = self._compile()

    def _compile(self) -> CompiledShapes:
        return _compiled(self.engine, tuple(_file_key(p) for p in self.shape_files))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._init_args)

    def __repr__(self) -> str:
        files = ", ".join(p.name for p in self.shape_files)
        return f"ShaclValidator(engine={self.engine!r}, shapes=[{files}])"

    def validate_graph(self, dataset: MappedDataset) -> ValidationReport:
        return self.validate_ntriples(
            dataset.ntriples, f"the mapped graph of {dataset.dataset_iri}"
        )

    def validate_ntriples(self, ntriples: bytes, what: str = "the graph") -> ValidationReport:
        """Validate one graph given as N-Triples (a whole document, for ``aggregator
        validate``; one mapped record in a harvest). Every node the shapes target is checked:
        catalogues, catalogue records, datasets, distributions, agents ..."""
        try:
            text = ntriples.decode("utf-8")
            raw = self._compiled.validate(text)
        except (UnicodeDecodeError, SyntaxError, ValueError) as err:
            raise ParseError(f"{what} cannot be parsed as N-Triples: {err}") from err
        findings = sorted((_finding(r) for r in raw), key=_sort_key)
        return ValidationReport(validator=self.name, findings=tuple(findings))
