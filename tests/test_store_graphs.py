"""Blank node scoping when records are loaded into named graphs in one bulk batch."""

from __future__ import annotations

from pathlib import Path

from pyoxigraph import NamedNode

from aggregator.store.graphs import GraphContent, OxigraphGraphs, to_nquads

P = "<http://example.org/p>"


def test_scoping_leaves_lookalikes_in_literals_and_iris_alone() -> None:
    nt = (
        f'_:c14n0 {P} "text with _:c14n0 inside" .\n'
        f"<http://example.org/a_:b> {P} _:c14n1 .\n"
        f"_:c14n1 {P} <http://example.org/x> .\n"
    ).encode()
    out = to_nquads(GraphContent("http://example.org/g", ((nt, "r7d"),), False)).decode()
    assert out.splitlines() == [
        f'_:r7d_c14n0 {P} "text with _:c14n0 inside" <http://example.org/g> .',
        f"<http://example.org/a_:b> {P} _:r7d_c14n1 <http://example.org/g> .",
        f"_:r7d_c14n1 {P} <http://example.org/x> <http://example.org/g> .",
    ]
    plain = f"_:c14n0 {P} _:c14n1 .\n".encode()
    assert to_nquads(GraphContent("http://e/g", ((plain, "s"),), False)) == (
        f"_:s_c14n0 {P} _:s_c14n1 <http://e/g> .\n".encode()
    )


def test_same_labels_in_parts_and_graphs_stay_distinct(tmp_path: Path) -> None:
    graphs = OxigraphGraphs(tmp_path / "g")
    part = f'_:c14n0 {P} "x" .\n'.encode()
    contents = [
        GraphContent(f"http://example.org/g{i}", ((part, f"r{i}d"), (part, f"r{i}c")), False)
        for i in range(2)
    ]
    graphs.replace(contents)
    subjects = {
        q.subject for q in graphs.store.quads_for_pattern(None, NamedNode(P[1:-1]), None, None)
    }
    assert len(subjects) == 4  # two parts in each of two graphs: four different nodes
    graphs.close()


def test_nquads_scope_labels_only_where_a_statement_can_hold_them() -> None:
    nt = (
        f'_:c14n0 {P} "ends with _:b" .\n'
        f"<http://e/a_:b> {P} _:c14n1 .\n"
        f'<http://e/s> {P} "_:x"@en .\n'
        f'<http://e/s> {P} "x _:y ." .\n'
        f"_:c14n1 {P} <http://e/_:z> .\n"
    ).encode()
    content = GraphContent("http://e/g", ((nt, "r1d"),), False)
    assert to_nquads(content).decode().splitlines() == [
        f'_:r1d_c14n0 {P} "ends with _:b" <http://e/g> .',
        f"<http://e/a_:b> {P} _:r1d_c14n1 <http://e/g> .",
        f'<http://e/s> {P} "_:x"@en <http://e/g> .',
        f'<http://e/s> {P} "x _:y ." <http://e/g> .',
        f"_:r1d_c14n1 {P} <http://e/_:z> <http://e/g> .",
    ]
    # no final line feed, and more content prepared elsewhere, come out right too
    tail = GraphContent("http://e/g", ((f"_:a {P} _:b .".encode(), "s"),), False, b"X\n")
    assert to_nquads(tail) == f"_:s_a {P} _:s_b <http://e/g> .\nX\n".encode()


def test_stale_contents_finds_exactly_the_graphs_that_differ(tmp_path: Path) -> None:
    """Recovery's comparison: a graph held exactly (literals normalised by the store, blank
    nodes relabelled) is left alone; a missing, half-loaded, older or overfull one is not."""
    from aggregator.store.graphs import stale_contents

    graphs = OxigraphGraphs(tmp_path / "g")
    size = '"5"^^<http://www.w3.org/2001/XMLSchema#nonNegativeInteger>'  # stored as integer
    full = f'_:c14n0 {P} {size} .\n<http://e/s> {P} _:c14n0 .\n<http://e/s> {P} "b" .\n'
    older = full.replace('"b"', '"a"')

    def content(i: int, nt: str) -> GraphContent:
        return GraphContent(f"http://e/g{i}", ((nt.encode(), f"r{i}d"),), True)

    graphs.replace([content(1, full), content(2, older), content(3, full)])
    graphs.replace([content(4, full.replace(f'<http://e/s> {P} "b" .\n', ""))])  # half
    graphs.replace([content(5, full + f'<http://e/s> {P} "c" .\n')])  # more than it should
    wanted = [content(i, full) for i in range(6)]  # g0 was never written
    stale = stale_contents(graphs, wanted, chunk=2)
    assert [c.graph_iri for c in stale] == [f"http://e/g{i}" for i in (0, 2, 4, 5)]
    graphs.replace(stale)
    assert stale_contents(graphs, wanted) == []
    graphs.close()


def test_gathered_batches_load_each_record_at_its_last_content() -> None:
    """Batches gathered into one bulk load (store/applier.py): a record written by two of
    them is loaded once, at its second content, and its old graph is replaced if either
    write found one."""
    from aggregator.store.applier import merged

    def content(iri: str, text: str, existed: bool) -> GraphContent:
        return GraphContent(iri, ((f'<{iri}> {P} "{text}" .\n'.encode(), "s"),), existed)

    first = [content("http://e/x", "x1", False), content("http://e/y", "y1", True)]
    second = [content("http://e/x", "x2", True), content("http://e/z", "z2", False)]
    out = merged([(first, [1, 2], 7, b""), (second, [1, 3], 8, b"")])
    assert sorted((c.graph_iri, c.parts[0][0].decode().split('"')[1], c.existed) for c in out) == [
        ("http://e/x", "x2", True),
        ("http://e/y", "y1", True),
        ("http://e/z", "z2", False),
    ]
    again = [content("http://e/y", "y2", False)]  # cannot come after a write, but is kept safe
    (y,) = [
        c
        for c in merged([(first, [1, 2], 7, b""), (again, [2], 8, b"")])
        if c.graph_iri == "http://e/y"
    ]
    assert y.existed and b"y2" in y.parts[0][0]
    assert merged([(first, [1, 2], 7, b"")]) is first
