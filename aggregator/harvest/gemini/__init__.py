"""ISO 19139 / UK GEMINI 2 documents as the harvesters see them.

:mod:`.records` reads the few facts every ISO harvester (CSW, WAF, single document) needs of a
record before the pipeline sees it (its identifier, its metadata date, whether it is one);
:mod:`.document` is the single-document harvester (protocol ``gemini-doc``).
"""

from aggregator.harvest.gemini.document import GeminiDocHarvester
from aggregator.harvest.gemini.records import (
    RECORD_TAGS,
    RecordFacts,
    looks_like_gemini,
    parse_metadata_date,
    record_facts,
    serialise_embedded,
)

__all__ = [
    "RECORD_TAGS",
    "GeminiDocHarvester",
    "RecordFacts",
    "looks_like_gemini",
    "parse_metadata_date",
    "record_facts",
    "serialise_embedded",
]
