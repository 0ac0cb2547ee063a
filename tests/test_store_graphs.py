"""Blank node scoping when records are loaded into named graphs in one bulk batch."""

from __future__ import annotations

from pathlib import Path

from pyoxigraph import NamedNode

from aggregator.store.graphs import GraphContent, OxigraphGraphs, scope_blank_nodes

P = "<http://example.org/p>"


def test_scoping_leaves_lookalikes_in_literals_and_iris_alone() -> None:
    nt = (
        f'_:c14n0 {P} "text with _:c14n0 inside" .\n'
        f"<http://example.org/a_:b> {P} _:c14n1 .\n"
        f"_:c14n1 {P} <http://example.org/x> .\n"
    ).encode()
    out = scope_blank_nodes(nt, "r7d").decode()
    assert out.splitlines() == [
        f'_:r7d_c14n0 {P} "text with _:c14n0 inside" .',
        f"<http://example.org/a_:b> {P} _:r7d_c14n1 .",
        f"_:r7d_c14n1 {P} <http://example.org/x> .",
    ]
    plain = f"_:c14n0 {P} _:c14n1 .\n".encode()
    assert scope_blank_nodes(plain, "s") == f"_:s_c14n0 {P} _:s_c14n1 .\n".encode()


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


def test_only_labels_detects_every_lookalike() -> None:
    from aggregator.store.graphs import _only_labels

    assert _only_labels(f'_:a {P} _:b .\n_:b {P} "x" .\n'.encode())
    assert not _only_labels(f'<http://e/s> {P} "ends with _:b ." .\n'.encode())
    assert not _only_labels(f"<http://e/a_:b> {P} _:b .\n".encode())
    assert not _only_labels(f'<http://e/s> {P} "_:x"@en .\n'.encode())
