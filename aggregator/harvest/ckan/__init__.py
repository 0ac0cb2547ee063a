"""The CKAN harvester (protocol ``ckan``): the action API's ``package_search``.

:mod:`.harvester` holds the harvester (the walk, the checkpoints, full and incremental runs);
:mod:`._paging` the keyset paging (where the next page starts, as an ``fq`` filter).
"""

from aggregator.harvest.ckan.harvester import (
    CkanHarvester,
    action_url,
    parse_datestamp,
    solr_date,
)

__all__ = ["CkanHarvester", "action_url", "parse_datestamp", "solr_date"]
