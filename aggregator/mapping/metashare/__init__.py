"""The META-SHARE v3.0 mapper (format key ``meta-share``) -> DCAT-AP 3.

:mod:`.mapper` holds the mapper; the ``_`` modules are its private parts: the rule file's
reader (:mod:`._rules`), the graph writing helpers (:mod:`._graph`) and the irregular parts
(:mod:`._parts`).
"""

from aggregator.mapping.metashare.mapper import MetaShareMapper, node_url

__all__ = ["MetaShareMapper", "node_url"]
