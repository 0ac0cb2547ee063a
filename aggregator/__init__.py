"""ld-aggregator: harvest remote catalogues, map to DCAT-AP 3, validate, store, republish."""

__version__ = "0.1.0.dev0"
