"""The DCAT-AP mapper (format key ``dcat``): the mapper and its canonical serialisation.

The steps live in the package's modules: :mod:`.input` (parsing, also used by the harvesters
and the payload), :mod:`.rules`, :mod:`.rule_table` and :mod:`.vocab` (the rule table and the
vocabulary tables, shared by the ckan, ogc-records and meta-share mappers),
:mod:`.accounting` (every input triple kept) and :mod:`.mapper` (the mapper); the ``_``
modules are its private helpers.
"""

from aggregator.mapping.dcat.mapper import MAX_CLOSURE, DcatMapper, canonical_quads

__all__ = ["MAX_CLOSURE", "DcatMapper", "canonical_quads"]
