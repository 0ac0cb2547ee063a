"""What every mapper's output goes through, in ``aggregator map`` and in a harvest alike.

After the format mapping, whatever the format, and before any graph validator:

1. the source's EU data-theme categorisation, when it has one
   (:mod:`aggregator.mapping.categorisation`; it reads free-text themes, so it runs before
   they become keywords);
2. the source's publisher for a dataset that names none, when the source has one
   (:mod:`aggregator.mapping.publisher`);
3. the DCAT-AP 3.0.1 class ranges (:mod:`aggregator.mapping.ranges`), so that each record
   carries the class of every value the range demands (the publisher's too).

``aggregator/jobs/processing.py`` (the harvest) and ``aggregator map`` both call
:func:`finish_mapped`, so what a publisher sees on the command line is what the aggregator
stores.

The content hash (a SHA-256 of the whole N-Triples, dear next to adding a few lines) is computed
once, by the last step, rather than by each step that changes the text: an ISO record is
changed by the categorisation and by the range step both (docs/benchmarks.md#issue-30).
"""

from __future__ import annotations

from collections.abc import Sequence

from aggregator.core.models import MappedDataset
from aggregator.mapping.base import MappingContext
from aggregator.mapping.categorisation import categorise
from aggregator.mapping.publisher import with_source_publisher
from aggregator.mapping.ranges import complete_ranges


def finish_mapped(datasets: Sequence[MappedDataset], ctx: MappingContext) -> list[MappedDataset]:
    """The mapped datasets of one record, categorised, with the source's publisher where
    they name none, and with their ranges completed."""
    out = []
    for ds in datasets:
        mapped = ds.ntriples
        if ctx.categorisation is not None:
            ds = categorise(ds, ctx.categorisation, hash_content=False)
        if ctx.publisher:
            ds = with_source_publisher(ds, ctx, hash_content=False)
        out.append(complete_ranges(ds, rehash=ds.ntriples is not mapped))
    return out
