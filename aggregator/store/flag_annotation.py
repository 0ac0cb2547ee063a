"""The flag of a record stored with violations, as statements of its catalogue record.

A flagged record (aggregator/validate/policy.py) is published with its findings, so that a
downstream portal, an analyst's SPARQL query and the source's publisher all see why::

    <record> dqv:hasQualityAnnotation _:flag .
    _:flag a dqv:QualityAnnotation ; oa:motivatedBy dqv:qualityAssessment ;
        oa:hasTarget <dataset> ; oa:hasBody _:report .
    _:report a sh:ValidationReport ; sh:conforms false ; sh:result _:v1, _:v2 ...
    _:v1 a sh:ValidationResult ; sh:resultSeverity sh:Violation ; sh:resultMessage "..." ;
        dct:identifier "<rule>" ; sh:focusNode <node> ; sh:resultPath <property> .

The annotation is DQV's (W3C Data Quality Vocabulary, as the DCAT-AP MQA publishes its
results), its body the SHACL validation report vocabulary: the violations only (warnings do
not flag), each with its rule, message and, where they are IRIs, focus node and path.
Only the store process writes it, from the record's findings, and only for flagged records.
"""

from __future__ import annotations

import json

from pyoxigraph import Literal, NamedNode

from aggregator.core.vocab import DCT, DQV, OA, RDF_TYPE, SH

_TYPE = f"<{RDF_TYPE}>"
_ANNOTATION = f"<{DQV}hasQualityAnnotation>"
_QA = f"<{DQV}QualityAnnotation>"
_MOTIVATED = f"<{OA}motivatedBy> <{DQV}qualityAssessment>"
_TARGET = f"<{OA}hasTarget>"
_BODY = f"<{OA}hasBody>"
_REPORT = f"<{SH}ValidationReport>"
_CONFORMS = f'<{SH}conforms> "false"^^<http://www.w3.org/2001/XMLSchema#boolean>'
_RESULT = f"<{SH}result>"
_RESULT_TYPE = f"<{SH}ValidationResult>"
_SEVERITY = f"<{SH}resultSeverity> <{SH}Violation>"
_MESSAGE = f"<{SH}resultMessage>"
_FOCUS = f"<{SH}focusNode>"
_PATH = f"<{SH}resultPath>"
_RULE = f"<{DCT}identifier>"


def _iri(value: object) -> str | None:
    """The N-Triples form of an IRI, or None for anything else (a line number, a blank)."""
    if not isinstance(value, str) or ":" not in value:
        return None
    try:
        return str(NamedNode(value))
    except ValueError:
        return None


def flag_ntriples(record: str, dataset_iri: str | None, findings_json: str) -> list[str]:
    """The statements (N-Triples lines) flagging the record ``record`` (an N-Triples IRI)."""
    lines = [
        f"{record} {_ANNOTATION} _:flag .",
        f"_:flag {_TYPE} {_QA} .",
        f"_:flag {_MOTIVATED} .",
        f"_:flag {_BODY} _:report .",
        f"_:report {_TYPE} {_REPORT} .",
        f"_:report {_CONFORMS} .",
    ]
    target = _iri(dataset_iri)
    if target:
        lines.append(f"_:flag {_TARGET} {target} .")
    try:
        findings = json.loads(findings_json)
    except ValueError:
        findings = []
    n = 0
    for f in findings if isinstance(findings, list) else ():
        if not isinstance(f, dict) or f.get("severity") != "violation":
            continue
        n += 1
        v = f"_:v{n}"
        lines += [
            f"_:report {_RESULT} {v} .",
            f"{v} {_TYPE} {_RESULT_TYPE} .",
            f"{v} {_SEVERITY} .",
            f"{v} {_MESSAGE} {Literal(str(f.get('message') or ''))} .",
            f"{v} {_RULE} {Literal(str(f.get('rule') or ''))} .",
        ]
        focus, path = _iri(f.get("location")), _iri(f.get("path"))
        if focus:
            lines.append(f"{v} {_FOCUS} {focus} .")
        if path:
            lines.append(f"{v} {_PATH} {path} .")
    return lines
