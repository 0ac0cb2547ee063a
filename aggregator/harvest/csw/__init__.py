"""The CSW 2.0.2 harvester (protocol ``csw``).

:mod:`.harvester` holds the harvester (paging and the walk); :mod:`.client` the requests,
responses, capabilities and checkpoints (also used by the demo CSW peer).
"""

from aggregator.harvest.csw.harvester import CswHarvester

__all__ = ["CswHarvester"]
