"""The Web Accessible Folder harvester (protocol ``waf``): ISO 19139 / GEMINI files listed
in a folder's index page.

:mod:`.harvester` walks the folder (per-file dates and record ids kept in the checkpoint, CSW
envelopes split into their records); :mod:`._listing` reads the index page.
"""

from aggregator.harvest.waf.harvester import WafHarvester

__all__ = ["WafHarvester"]
