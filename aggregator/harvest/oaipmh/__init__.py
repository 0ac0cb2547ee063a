"""The OAI-PMH 2.0 harvester (protocol ``oai-pmh``): ``ListRecords`` over resumption tokens.

:mod:`.harvester` holds the harvester (the walk, the completeness rules); :mod:`._client` the
protocol client of our own (requests, hardened page parsing, resumption tokens, OAI errors).
"""

from aggregator.harvest.oaipmh._client import parse_datestamp
from aggregator.harvest.oaipmh.harvester import OaiPmhHarvester, OaiPmhOptions

__all__ = ["OaiPmhHarvester", "OaiPmhOptions", "parse_datestamp"]
