"""The SOAP MDR harvester (protocol ``mdr``).

:mod:`.harvester` holds the replication walk; :mod:`.client` the zeep client with WS-Security;
:mod:`.monitor` the status monitor (run by ``aggregator mdr monitor``); :mod:`._events` the MDC
events both report.
"""

from aggregator.harvest.mdr.harvester import MdrHarvester

__all__ = ["MdrHarvester"]
