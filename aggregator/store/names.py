"""What a store's IRIs are and what each record's named graph holds, without opening
anything: enough for the serving processes (which read the state database and a graph
snapshot themselves), the writer (``records.py``) and the checks (``check.py``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from pyoxigraph import Literal, NamedNode

from aggregator.core.vocab import (
    AGG_FORMAT,
    AGG_HARVEST_SOURCE,
    AGG_PAYLOAD,
    AGG_SOURCE_DATESTAMP,
    AGG_STATUS,
    DCAT,
    DCT,
    FOAF,
    PROV,
    RDF_TYPE,
    SPDX,
    STATUS_IRIS,
    XSD,
    minted_iri,
)
from aggregator.store.flag_annotation import flag_ntriples
from aggregator.store.graphs import GraphContent, statements
from aggregator.store.shared import record_shared, shared_graph_iri, split
from aggregator.store.state import RecordRow, RecordWrite


def _iri(value: str) -> str:
    return str(NamedNode(value))


def _lit(value: str, datatype: str | None = None) -> str:
    if datatype:
        return str(Literal(value, datatype=NamedNode(datatype)))
    return str(Literal(value))


# The fixed terms of the catalogue record, in N-Triples form once (pyoxigraph checks them).
_XSD_DATETIME = XSD + "dateTime"
_XSD_HEX = XSD + "hexBinary"
_T_TYPE = _iri(RDF_TYPE)
_T_CATALOG_RECORD = _iri(DCAT + "CatalogRecord")
_T_ISSUED = _iri(DCT + "issued")
_T_MODIFIED = _iri(DCT + "modified")
_T_IDENTIFIER = _iri(DCT + "identifier")
_T_HARVEST_SOURCE = _iri(AGG_HARVEST_SOURCE)
_T_STATUS = _iri(AGG_STATUS)
_T_STATUS_VALUES = {status: _iri(iri) for status, iri in STATUS_IRIS.items()}
_T_PRIMARY_TOPIC = _iri(FOAF + "primaryTopic")
_T_SOURCE_DATESTAMP = _iri(AGG_SOURCE_DATESTAMP)
_T_GENERATED_BY = _iri(PROV + "wasGeneratedBy")
_T_FORMAT = _iri(AGG_FORMAT)
_T_PAYLOAD = _iri(AGG_PAYLOAD)
_T_CHECKSUM = _iri(SPDX + "checksum")
_T_CHECKSUM_VALUE = _iri(SPDX + "checksumValue")
_CHECKSUM_TYPE = f"_:checksum {_T_TYPE} {_iri(SPDX + 'Checksum')} ."
_CHECKSUM_ALGORITHM = (
    f"_:checksum {_iri(SPDX + 'algorithm')} {_iri(SPDX + 'checksumAlgorithm_sha256')} ."
)


class StoreNames:
    """What a store's IRIs and catalogue records are, without opening anything: enough for
    the serving processes, which read the state database and a graph snapshot themselves."""

    def __init__(self, path: Path, base_iri: str) -> None:
        self.path = path
        self.base_iri = base_iri

    # -- IRIs -------------------------------------------------------------------------------
    def record_iri(self, source: str, local_id: str) -> str:
        return minted_iri(self.base_iri, source, "record", local_id)

    def source_iri(self, source: str) -> str:
        return f"{self.base_iri}source/{quote(source, safe='')}"

    def payload_iri(self, sha: str) -> str:
        return f"{self.base_iri}payload/{sha}"

    def job_iri(self, job_id: int) -> str:
        return f"{self.base_iri}job/{job_id}"

    # -- the catalogue record ---------------------------------------------------------------
    def catalog_record_ntriples(self, w: RecordWrite | RecordRow) -> bytes:
        rec = _iri(w.record_iri)
        lines = [
            f"{rec} {_T_TYPE} {_T_CATALOG_RECORD} .",
            f"{rec} {_T_ISSUED} {_lit(w.first_seen, _XSD_DATETIME)} .",
            f"{rec} {_T_MODIFIED} {_lit(w.modified, _XSD_DATETIME)} .",
            f"{rec} {_T_IDENTIFIER} {_lit(w.local_id)} .",
            f"{rec} {_T_HARVEST_SOURCE} {_iri(self.source_iri(w.source))} .",
            f"{rec} {_T_STATUS} {_T_STATUS_VALUES[w.status]} .",
        ]
        if w.dataset_iri:
            lines.append(f"{rec} {_T_PRIMARY_TOPIC} {_iri(w.dataset_iri)} .")
        if w.source_datestamp:
            lines.append(f"{rec} {_T_SOURCE_DATESTAMP} {_lit(w.source_datestamp, _XSD_DATETIME)} .")
        if w.job_id is not None:
            lines.append(f"{rec} {_T_GENERATED_BY} {_iri(self.job_iri(w.job_id))} .")
        if w.format:
            lines.append(f"{rec} {_T_FORMAT} {_lit(w.format)} .")
        if w.payload_sha:
            lines.append(f"{rec} {_T_PAYLOAD} {_iri(self.payload_iri(w.payload_sha))} .")
        if w.content_hash:
            lines += [
                f"{rec} {_T_CHECKSUM} _:checksum .",
                _CHECKSUM_TYPE,
                _CHECKSUM_ALGORITHM,
                f"_:checksum {_T_CHECKSUM_VALUE} {_lit(w.content_hash, _XSD_HEX)} .",
            ]
        if w.flagged and w.status == "active":
            lines += flag_ntriples(rec, w.dataset_iri, w.findings)
        return ("\n".join(lines) + "\n").encode()

    def graph_content(
        self,
        w: RecordWrite | RecordRow,
        record_id: int,
        existed: bool,
        ntriples: bytes,
        catalog: bytes,
    ) -> GraphContent:
        """What the record's named graph holds: its catalogue record and, while it is
        active, its dataset description and the source's catalogue facts."""
        parts = [(self.catalog_record_ntriples(w), f"r{record_id}m")]
        prepared = b""
        if w.status == "active":
            if isinstance(w, RecordWrite) and w.nquads:
                prepared = w.nquads  # built (and split) by the worker for this record IRI
            else:
                own = (w.record_iri, w.dataset_iri or "")
                parts += [
                    (split(ntriples, own).owned, f"r{record_id}d"),
                    (split(catalog, own).owned, f"r{record_id}c"),
                ]
        return GraphContent(w.record_iri, tuple(parts), existed, prepared)

    @property
    def shared_graph(self) -> str:
        return shared_graph_iri(self.base_iri)

    def shared_statements(
        self, w: RecordWrite | RecordRow, ntriples: bytes, catalog: bytes
    ) -> tuple[bytes, ...]:
        """The statements a record leaves to the shared graph (``shared.py``)."""
        if w.status != "active":
            return ()
        if isinstance(w, RecordWrite) and w.nquads:
            return tuple(statements(w.shared)) if w.shared else ()
        return record_shared(w.record_iri, w.dataset_iri, ntriples, catalog).shared
