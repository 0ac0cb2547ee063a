"""DOCTYPE pre-scan benchmark (not a test): the RDF/XML check every RDF/XML record and dump
goes through (:func:`aggregator.mapping.dcat.input.check_rdf_xml`) and the protocol parser's
pre-scan (:func:`aggregator.core.xml.parse_xml`), on one synthetic ~5 KB DCAT-AP record and on a
~2 MB dump of 200 of them. CPU time per call (``time.process_time``, best of 7), so that other
load on the machine counts less.

    python bench/doctype_prescan.py
"""

from __future__ import annotations

import json
import time
import timeit

from pyoxigraph import RdfFormat, parse, serialize

from aggregator.core.xml import scan_prolog
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.mapping.dcat.input import check_rdf_xml


def per_call(fn: object, number: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=7, timer=time.process_time)  # type: ignore[arg-type]
    return min(runs) / number * 1e6


def main() -> None:
    record = generate_dataset(7)
    quads = [q for i in range(200) for q in parse(generate_dataset(i), format=RdfFormat.RDF_XML)]
    dump = serialize([q.triple for q in quads], format=RdfFormat.RDF_XML) or b""
    print(
        json.dumps(
            {
                "record_bytes": len(record),
                "check_rdf_xml_record_us": round(per_call(lambda: check_rdf_xml(record), 20000), 2),
                "scan_prolog_record_us": round(per_call(lambda: scan_prolog(record), 20000), 2),
                "dump_bytes": len(dump),
                "check_rdf_xml_dump_us": round(per_call(lambda: check_rdf_xml(dump), 200), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
