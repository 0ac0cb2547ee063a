"""The CKAN mapper (format key ``ckan``): a CKAN package -> DCAT-AP 3.

:mod:`.mapper` holds the mapper and the reader of its field table (``mappings/ckan.toml``);
the ``_`` modules are its private parts: the field kinds, how one value becomes RDF
(:mod:`._values`; those describing a file in :mod:`._files`), over the graph being built and
the readers of loose values (:mod:`._graph`). The table reader and the field kinds are shared
with the ``ogc-records`` mapper, which is why this face exports them.
"""

from aggregator.mapping.ckan._files import file_type
from aggregator.mapping.ckan._graph import (
    A,
    Graph,
    Subject,
    is_url,
    text_of,
)
from aggregator.mapping.ckan._values import (
    KINDS,
    emit_agent,
    emit_contact,
    finish,
)
from aggregator.mapping.ckan.mapper import CkanMapper, CkanTable, FieldRow, field_rows, load_table

__all__ = [
    "KINDS",
    "A",
    "CkanMapper",
    "CkanTable",
    "FieldRow",
    "Graph",
    "Subject",
    "emit_agent",
    "emit_contact",
    "field_rows",
    "file_type",
    "finish",
    "is_url",
    "load_table",
    "text_of",
]
