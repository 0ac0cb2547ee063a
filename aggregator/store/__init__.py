"""The record store: named graphs in Oxigraph, state and journal in SQLite."""
