"""The ISO 19139 / UK GEMINI 2.3 mapper (format key ``iso19139``) -> GeoDCAT-AP.

:mod:`.mapper` holds the mapper; the ``_`` modules are its private parts: the declarative
table (:mod:`._table`), the XML helpers and canonical N-Triples (:mod:`._xml`) and the irregular
parts (:mod:`._parts`, :mod:`._quality`, :mod:`._agents`, :mod:`._distribution`).
"""

from aggregator.mapping.iso19139.mapper import IsoMapper

__all__ = ["IsoMapper"]
