"""The SPARQL harvester (protocol ``sparql``): DCAT-AP descriptions from a SPARQL 1.1 endpoint.

:mod:`.harvester` holds the harvester (options, the count and keyset-paged listing, the
requests); :mod:`._closure` the batch query of the datasets' closures and the graphs it
answers; :mod:`._results` the reading of result rows as N-Triples terms.
"""

from aggregator.harvest.sparql.harvester import (
    SparqlHarvester,
    SparqlOptions,
    page_query,
    safe_iri,
    string_literal,
)

__all__ = ["SparqlHarvester", "SparqlOptions", "page_query", "safe_iri", "string_literal"]
