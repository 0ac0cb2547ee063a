"""An example ld-aggregator plugin: JSON lines over HTTP (see README.md)."""
