"""The SPARQL default graph is a set (an RDF merge of the records), seen from an analyst's
side: counts over the endpoint equal the distinct statements the records make, group-bys
without DISTINCT equal those with it, ``GRAPH ?g`` still says which record states what, and a
withdrawal takes a shared statement away only with the last record that states it
(aggregator/store/shared.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyoxigraph import RdfFormat, Store, parse
from SPARQLWrapper import JSON, SPARQLWrapper
from starlette.applications import Starlette
from storecheck import assert_consistent, make_unversioned
from test_serve_sparql import T0, Harvested, Served

from aggregator.demo.peers.oaipmh_items import OaiItem
from aggregator.serve.sparql import routes
from aggregator.store.journal import now_iso
from aggregator.store.records import RecordStore
from aggregator.store.shared import split
from aggregator.store.state import RecordWrite

N = 40
PREFIXES = (
    "PREFIX dcat: <http://www.w3.org/ns/dcat#> PREFIX dct: <http://purl.org/dc/terms/>"
    " PREFIX foaf: <http://xmlns.com/foaf/0.1/> PREFIX skos: <http://www.w3.org/2004/02/skos/core#>"
)
PER_THEME = PREFIXES + (
    " SELECT ?theme (COUNT({d}?d) AS ?n) WHERE {{ ?d a dcat:Dataset ; dcat:theme ?theme ."
    " ?theme skos:prefLabel ?label }} GROUP BY ?theme ORDER BY ?theme"
)
PER_PUBLISHER = PREFIXES + (
    " SELECT ?name (COUNT({d}?d) AS ?n) WHERE {{ ?d a dcat:Dataset ; dct:publisher ?p ."
    " ?p a foaf:Agent ; foaf:name ?name }} GROUP BY ?name ORDER BY ?name"
)
PER_FORMAT = PREFIXES + (
    " SELECT ?f (COUNT({d}?x) AS ?n) WHERE {{ ?d dcat:distribution ?x . ?x dct:format ?f ."
    " ?f a dct:MediaTypeOrExtent }} GROUP BY ?f ORDER BY ?f"
)


class Endpoint:
    def __init__(self, harvested: Harvested) -> None:
        sparql_routes = routes(harvested.context())
        app = Starlette(routes=sparql_routes, lifespan=sparql_routes.endpoint.lifespan)
        self.served = Served(app)

    def select(self, query: str) -> list[dict[str, str]]:
        client = SPARQLWrapper(self.served.url)
        client.setQuery(query)
        client.setReturnFormat(JSON)
        result: Any = client.query().convert()
        return [{k: v["value"] for k, v in b.items()} for b in result["results"]["bindings"]]

    def count(self, query: str) -> int:
        return int(self.select(query)[0]["n"])

    def ask(self, query: str) -> bool:
        client = SPARQLWrapper(self.served.url)
        client.setQuery(query)
        client.setReturnFormat(JSON)
        result: Any = client.query().convert()
        return bool(result["boolean"])


@pytest.fixture
def harvested(tmp_path: Path) -> Iterator[Harvested]:
    h = Harvested(tmp_path, N)
    yield h
    h.close()


def merge_of_records(store: RecordStore) -> Store:
    """The RDF merge of every record's full description, as the state database keeps it
    (each part its own blank node scope): what the default graph must be."""
    merge = Store()
    for row in store.db.iter_records():
        parts = [store.catalog_record_ntriples(row)]
        if row.status == "active":
            parts += [store.dataset_ntriples(row), store.catalog_ntriples(row)]
        for part in parts:
            if part:
                merge.load(part, format=RdfFormat.N_TRIPLES)
    return merge


def test_counts_group_bys_and_provenance_over_the_endpoint(harvested: Harvested) -> None:
    store = harvested.store
    # the generated records share themes, licences, formats and publishers
    shared = dict(store.db.conn.execute("SELECT triple, refs FROM shared_triples"))
    assert shared and max(shared.values()) >= 5
    endpoint = Endpoint(harvested)
    try:
        merge = merge_of_records(store)
        distinct = len(merge)
        # every stated triple is seen once: COUNT(*) is the number of distinct triples
        assert endpoint.count("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }") == distinct
        assert (
            endpoint.count(
                "SELECT (COUNT(*) AS ?n) WHERE { SELECT DISTINCT ?s ?p ?o WHERE { ?s ?p ?o } }"
            )
            == distinct
        )
        for query in (PER_THEME, PER_PUBLISHER, PER_FORMAT):
            plain = endpoint.select(query.format(d=""))
            assert plain, query
            assert plain == endpoint.select(query.format(d="DISTINCT "))
            # ... and both are what the merge of the records says
            truth = [
                {k: v.value for k, v in zip(("k", "n"), (r[0], r[1]), strict=True)}
                for r in merge.query(query.format(d="DISTINCT "))
            ]
            assert [list(r.values()) for r in plain] == [list(r.values()) for r in truth]
        # provenance: each dataset is found in its own record's graph, with its record
        rows = endpoint.select(
            PREFIXES + " SELECT ?g ?d WHERE { GRAPH ?g { ?r foaf:primaryTopic ?d ."
            " ?d a dcat:Dataset ; dct:title ?t } }"
        )
        active = {r.record_iri: r.dataset_iri for r in store.db.iter_records()}
        assert {(r["g"], r["d"]) for r in rows} == set(active.items())
        # a theme's datasets, by the records that state them (no shared graph in between)
        by_record = endpoint.select(
            PREFIXES + " SELECT DISTINCT ?g WHERE { GRAPH ?g { ?d dcat:theme ?t } }"
        )
        assert {r["g"] for r in by_record} <= set(active)
    finally:
        endpoint.served.stop()
    assert_consistent(store)


def test_a_shared_statement_goes_with_the_last_record_that_states_it(
    harvested: Harvested,
) -> None:
    store = harvested.store
    rows = {r.local_id: r for r in store.db.iter_records()}
    counts = dict(store.db.conn.execute("SELECT triple, refs FROM shared_triples"))
    stated_by: dict[bytes, list[str]] = {}
    for local_id, row in rows.items():
        for s in store.shared_statements(
            row, store.dataset_ntriples(row), store.catalog_ntriples(row)
        ):
            stated_by.setdefault(s, []).append(local_id)
    assert {k: len(v) for k, v in stated_by.items()} == counts
    # a statement several records share, and the records that state it
    common = max(stated_by, key=lambda s: len(stated_by[s]))
    holders = stated_by[common]
    assert len(holders) >= 3
    ask = f"ASK {{ {common.decode()} }}"
    endpoint = Endpoint(harvested)
    try:
        assert endpoint.ask(ask)
        # the source deletes all but one of them: the statement stays, counted once
        for n, local_id in enumerate(holders[:-1]):
            harvested.items.put(OaiItem(local_id, T0 + timedelta(days=30 + n), (), True, b""))
        harvested.run()
        assert store.db.counts_by_status("portal") == {
            "active": N - len(holders) + 1,
            "withdrawn": len(holders) - 1,
        }
        assert endpoint.ask(ask)
        assert store.db.conn.execute(
            "SELECT refs FROM shared_triples WHERE triple = ?", (common,)
        ).fetchone() == (1,)
        assert_consistent(store)
        # ... then the last one: it goes
        harvested.items.put(OaiItem(holders[-1], T0 + timedelta(days=99), (), True, b""))
        harvested.run()
        assert not endpoint.ask(ask)
        assert endpoint.count("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }") == len(
            merge_of_records(store)
        )
    finally:
        endpoint.served.stop()
    assert_consistent(store)


def _write(store: RecordStore, source: str, local_id: str, nt: bytes, existed: bool) -> RecordWrite:
    job_id = store.db.conn.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0
    stamp = now_iso()
    prior = store.record(source, local_id)
    return RecordWrite(
        source=source,
        local_id=local_id,
        record_iri=store.record_iri(source, local_id),
        dataset_iri=f"http://example.org/ds/{local_id}",
        status="active" if nt else "withdrawn",
        content_hash=f"h-{hash(nt)}",
        first_seen=prior.first_seen if prior else stamp,
        modified=stamp,
        source_datestamp=None,
        job_id=job_id,
        format="dcat-ap",
        payload_sha=None,
        url=None,
        themes="",
        ntriples=nt,
        catalog_ntriples=b"",
        findings="[]",
        existed=existed,
        modified_at_commit=True,
    )


THEME = "<http://publications.europa.eu/resource/authority/data-theme/ENVI>"
LABEL = f'{THEME} <http://www.w3.org/2004/02/skos/core#prefLabel> "Environment"@en'


def _dataset(local_id: str, *, theme: bool) -> bytes:
    ds = f"<http://example.org/ds/{local_id}>"
    lines = [
        f"{ds} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <http://www.w3.org/ns/dcat#Dataset>",
        f'{ds} <http://purl.org/dc/terms/title> "{local_id}"',
    ]
    if theme:
        lines += [f"{ds} <http://www.w3.org/ns/dcat#theme> {THEME}", LABEL]
    return ("".join(line + " .\n" for line in lines)).encode()


def _held(store: RecordStore) -> bool:
    store.sync()
    return bool(store.graphs.query(f"ASK {{ GRAPH <{store.shared_graph}> {{ {LABEL} }} }}"))


def test_counts_follow_writes_gathered_into_one_load(tmp_path: Path) -> None:
    """Record a states the label first (counted from zero: loaded with its batch), b states it
    too (counted, not loaded again), then a drops it: three batches gathered into one bulk load
    must leave it in the shared graph, as b still states it; when b drops it, it goes."""
    with RecordStore(tmp_path / "s", "http://agg.example/", gather_records=10_000) as store:
        job = store.jobs.start("src", full=True)
        store.write(job, [_write(store, "src", "a", _dataset("a", theme=True), False)])
        store.write(job, [_write(store, "src", "b", _dataset("b", theme=True), False)])
        store.write(job, [_write(store, "src", "a", _dataset("a", theme=False), True)])
        assert _held(store)
        assert_consistent(store)
        store.write(job, [_write(store, "src", "b", _dataset("b", theme=False), True)])
        assert not _held(store)
        assert_consistent(store)
        # stated again after it went: loaded again
        store.write(job, [_write(store, "src", "c", _dataset("c", theme=True), False)])
        assert _held(store)
        # a withdrawal (no dataset any more) gives its statements back
        store.write(job, [_write(store, "src", "c", b"", True)])
        assert not _held(store)
        assert_consistent(store)
        assert store.db.conn.execute("SELECT count(*) FROM shared_triples").fetchone() == (0,)


def test_what_a_record_owns_and_what_it_shares() -> None:
    ds, dist, rec = "http://e/ds", "http://e/dist", "http://e/rec"
    p = "<http://e/p>"
    nt = (
        f"<{ds}> <http://www.w3.org/ns/dcat#distribution> <{dist}> .\n"
        f'<{dist}> {p} "csv" .\n'  # the dataset's distribution: owned
        f'<{ds}> {p} "title"@en .\n'  # the dataset: owned
        f'<{rec}> {p} "r" .\n'  # the catalogue record: owned
        f"<http://e/theme> {p} <http://e/scheme> .\n"  # shared
        f'<http://e/theme> {p} "Environment"@en-GB .\n'  # shared
        f'<http://e/theme> {p} "plain" .\n'  # shared
        f"<http://e/agent> {p} _:b0 .\n"  # a blank object: the record's own
        f'_:b0 {p} "x" .\n'  # a blank subject: the record's own
        # a typed literal: shared, in the form Oxigraph stores it (xsd:int is stored as
        # xsd:integer): so "2"^^xsd:int and "2"^^xsd:integer count as one statement
        f'<http://e/agent> {p} "2"^^<http://www.w3.org/2001/XMLSchema#int> .\n'
        f'<http://e/agent> {p} "a \\"quoted\\"^^<x> string" .\n'  # a plain string: shared
    ).encode()
    out = split(nt, (rec, ds))
    assert [s.decode() for s in out.shared] == [
        f"<http://e/theme> {p} <http://e/scheme>",
        f'<http://e/theme> {p} "Environment"@en-GB',
        f'<http://e/theme> {p} "plain"',
        f'<http://e/agent> {p} "2"^^<http://www.w3.org/2001/XMLSchema#integer>',
        f'<http://e/agent> {p} "a \\"quoted\\"^^<x> string"',
    ]
    owned = out.owned.decode()
    assert owned.count(" .\n") == 6
    assert "theme" not in owned
    # nothing shared: the text as it was
    only = f'<{ds}> {p} "t" .\n'.encode()
    assert split(only, (rec, ds)).owned is only


def test_a_store_of_the_old_layout_is_split_when_a_writer_opens_it(harvested: Harvested) -> None:
    """A store made before schema version 5 holds every statement in its record's graph: the
    upgrade marks the active records, and the replay at the next open moves the shared
    statements into the shared graph, counted; the default graph is a set again."""
    import sqlite3

    from pyoxigraph import NamedNode

    from aggregator.store.graphs import GraphContent, OxigraphGraphs

    store = harvested.store
    path = harvested.settings.store_path
    rows = [r for r in store.db.iter_records() if r.status == "active"]
    full = [
        GraphContent(
            r.record_iri,
            (
                (store.catalog_record_ntriples(r), f"r{r.id}m"),
                (store.dataset_ntriples(r), f"r{r.id}d"),
                (store.catalog_ntriples(r), f"r{r.id}c"),
            ),
            True,
        )
        for r in rows
    ]
    distinct = len(merge_of_records(store))
    store.close()
    graphs = OxigraphGraphs(path / "graphs")  # the graphs as the old code wrote them
    graphs.replace(full)
    graphs.store.remove_graph(NamedNode(f"{harvested.settings.base_iri}shared"))
    graphs.close()
    con = sqlite3.connect(path / "state.sqlite3")
    with con:
        make_unversioned(con)
    con.close()
    harvested.store = store = RecordStore(path, harvested.settings.base_iri)
    assert store.recovery.pending == len(rows)
    assert store.recovery.repaired == len(rows)  # every graph held shared statements
    assert_consistent(store)
    count = store.graphs.query("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }")
    assert int(next(iter(count))["n"].value) == distinct  # type: ignore[arg-type,index,union-attr]
    assert store.db.get_meta("shared_split_pending") is None


def test_the_dashboard_examples_answer_over_the_shared_graph(harvested: Harvested) -> None:
    """Each example query of the dashboard's SPARQL page runs against a harvested store and
    finds something; the one dataset's description holds its theme's label (shared)."""
    from aggregator.serve.dashboard.sparql_page import EXAMPLES

    endpoint = Endpoint(harvested)
    try:
        for title, query in EXAMPLES:
            client = SPARQLWrapper(endpoint.served.url)
            client.setQuery(query)
            if "CONSTRUCT" in query:
                client.setReturnFormat("turtle")
                data = client.query().convert()
                assert isinstance(data, bytes)
                triples = list(parse(data, format=RdfFormat.TURTLE))
                assert any(t.predicate.value.endswith("#prefLabel") for t in triples), title
                assert any(t.predicate.value.endswith("#theme") for t in triples), title
            else:
                assert endpoint.select(query), title
    finally:
        endpoint.served.stop()


def test_typed_literals_about_shared_resources_count_as_the_store_holds_them(
    tmp_path: Path,
) -> None:
    """Two records give a specification's date and size, one as xsd:int, the other as
    xsd:integer (one stored statement: Oxigraph normalises the datatype): the default graph
    holds each once, and withdrawing one record keeps what the other still states."""
    spec = "<http://data.europa.eu/eli/reg/2010/1089>"
    xsd = "http://www.w3.org/2001/XMLSchema#"

    def record(local_id: str, int_type: str) -> bytes:
        lines = [
            f"<http://example.org/ds/{local_id}> <http://purl.org/dc/terms/conformsTo> {spec}",
            f'{spec} <http://purl.org/dc/terms/issued> "2010-12-08"^^<{xsd}date>',
            f'{spec} <http://example.org/size> "1089"^^<{xsd}{int_type}>',
        ]
        return "".join(line + " .\n" for line in lines).encode()

    count = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"
    distinct = "SELECT (COUNT(*) AS ?n) WHERE { SELECT DISTINCT ?s ?p ?o WHERE { ?s ?p ?o } }"
    with RecordStore(tmp_path / "s", "http://agg.example/") as store:
        job = store.jobs.start("src", full=True)
        store.write(
            job,
            [
                _write(store, "src", "a", record("a", "int"), False),
                _write(store, "src", "b", record("b", "integer"), False),
            ],
        )
        store.sync()

        def n(query: str) -> int:
            return int(next(iter(store.graphs.query(query)))["n"].value)  # type: ignore[arg-type,index,union-attr]

        assert n(count) == n(distinct)
        size = f'ASK {{ {spec} <http://example.org/size> "1089"^^<{xsd}integer> }}'
        store.write(job, [_write(store, "src", "a", b"", True)])  # a withdrawn
        store.sync()
        assert store.graphs.query(size)  # b still states it
        assert n(count) == n(distinct)
        assert_consistent(store)
        store.write(job, [_write(store, "src", "b", b"", True)])
        store.sync()
        assert not store.graphs.query(size)
        assert_consistent(store)


def _reference_split(lines: list[bytes], own: tuple[str, ...]) -> tuple[set[bytes], set[bytes]]:
    """The rule of shared.py, one statement at a time, parsed by pyoxigraph."""
    from pyoxigraph import BlankNode, Literal, NamedNode

    from aggregator.store.shared import as_stored

    triples = [
        (line, next(iter(parse(line + b" .\n", format=RdfFormat.N_TRIPLES)))) for line in lines
    ]
    owned = {NamedNode(i) for i in own}
    owned |= {
        t.object
        for _, t in triples
        if t.subject in owned
        and t.predicate.value == "http://www.w3.org/ns/dcat#distribution"
        and isinstance(t.object, NamedNode)
    }
    kept, shared = set(), set()
    for line, t in triples:
        if (
            isinstance(t.subject, NamedNode)
            and t.subject not in owned
            and not isinstance(t.object, BlankNode)
        ):
            typed = isinstance(t.object, Literal) and t.object.datatype.value not in (
                "http://www.w3.org/2001/XMLSchema#string",
                "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString",
            )
            shared.add(as_stored(line) if typed else line)
        else:
            kept.add(line)
    return kept, shared


def test_the_split_agrees_with_the_rule_statement_by_statement() -> None:
    """The block-wise split (sorted input) and the line-wise one (unsorted) give what the
    rule says, on generated DCAT-AP records as the harvest maps them."""
    import random

    from aggregator.core.models import RawRecord
    from aggregator.demo.peers.sample_data import generate_dataset
    from aggregator.mapping.base import MappingContext
    from aggregator.mapping.dcat.mapper import DcatMapper
    from aggregator.mapping.finish import finish_mapped
    from aggregator.store.graphs import statements
    from aggregator.store.shared import split_lines

    ctx = MappingContext(base_iri="https://agg.example.org/", source="bench")
    mapper = DcatMapper()
    rng = random.Random(7)
    checked = 0
    for i in range(40):
        raw = RawRecord("bench", f"r{i}", "dcat", generate_dataset(i), "application/rdf+xml")
        for ds in finish_mapped(mapper.map(raw, ctx), ctx):
            own = ("https://agg.example.org/record/bench/r", ds.dataset_iri)
            for text in (ds.ntriples, ds.catalog_ntriples):
                lines = statements(text) if text else []
                want = _reference_split(lines, own)
                kept, shared = split_lines(lines, own)
                assert (set(kept), set(shared)) == want
                assert len(kept) + len(shared) == len(lines)
                shuffled = lines[:]
                rng.shuffle(shuffled)
                kept, shared = split_lines(shuffled, own)
                assert (set(kept), set(shared)) == want
                checked += 1
    assert checked >= 40
