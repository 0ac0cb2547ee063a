"""MQA scores of hand-written datasets, the best-distribution rule and the rating bands."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyoxigraph import RdfFormat, parse, serialize

from aggregator.core.models import RawRecord
from aggregator.demo.peers.sample_data import generate_dataset
from aggregator.mapping.base import MappingContext
from aggregator.mapping.dcat import DcatMapper
from aggregator.validate.quality import (
    INDICATORS,
    MAX_POINTS,
    DatasetQuality,
    Dimension,
    QualityError,
    Rating,
    assess,
    link_urls,
    rating_for,
)
from aggregator.validate.quality.reachability import Outcome, ReachabilityResult

DATA = Path(__file__).parent / "data" / "quality"


def ntriples(name: str) -> bytes:
    turtle = (DATA / name).read_bytes()
    out = serialize(parse(turtle, format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
    assert out is not None
    return out


def ok(url: str, status: int = 200) -> ReachabilityResult:
    return ReachabilityResult(url, Outcome.OK, status, "HEAD", 0.0)


def gone(url: str) -> ReachabilityResult:
    return ReachabilityResult(url, Outcome.HTTP_ERROR, 404, "GET", 0.0)


def dims(q: DatasetQuality) -> dict[str, int]:
    return {d.dimension.value: d.earned for d in q.dimensions}


def test_the_method_has_405_points_in_five_dimensions() -> None:
    assert MAX_POINTS == 405
    per_dimension = {d: sum(i.points for i in INDICATORS if i.dimension is d) for d in Dimension}
    assert per_dimension == {
        Dimension.FINDABILITY: 100,
        Dimension.ACCESSIBILITY: 100,
        Dimension.INTEROPERABILITY: 110,
        Dimension.REUSABILITY: 75,
        Dimension.CONTEXTUALITY: 20,
    }
    assert len({i.key for i in INDICATORS}) == len(INDICATORS) == 23


@pytest.mark.parametrize(
    ("points", "rating"),
    [
        (405, Rating.EXCELLENT),
        (351, Rating.EXCELLENT),
        (350, Rating.GOOD),
        (221, Rating.GOOD),
        (220, Rating.SUFFICIENT),
        (121, Rating.SUFFICIENT),
        (120, Rating.BAD),
        (0, Rating.BAD),
    ],
)
def test_rating_bands(points: int, rating: Rating) -> None:
    assert rating_for(points) is rating


def test_excellent_dataset() -> None:
    # Findability     keyword 30 + theme 30 + spatial 20 + temporal 20                 = 100
    # Accessibility   (best distribution: csv) accessURL reachable 50
    #                 + downloadURL 20 + downloadURL reachable 30                        = 100
    # Interoperability format 20 + media type 10 + vocabulary 10 (EU CSV, IANA text/csv)
    #                 + non-proprietary 20 + machine-readable 20 + DCAT-AP compliant 30  = 110
    # Reusability     licence 20 + EU licence 10 + access rights 10 + PUBLIC 5
    #                 + contact point 20 + publisher 10                                   =  75
    # Contextuality   rights 0 (only the PDF has it) + byte size 5 + issued 5
    #                 + modified 5                                                        =  15
    # Total 400 -> excellent (351-405)
    # The PDF distribution scores 200 on the distribution-level indicators (not
    # machine-readable -20, rights +5), the CSV one 215: the CSV one is the best.
    urls = {
        "https://files.example.org/air-quality/",
        "https://files.example.org/air-quality/data.csv",
        "https://files.example.org/air-quality/report.pdf",
    }
    data = ntriples("excellent.ttl")
    assert link_urls(data) == urls
    q = assess(data, reachability={u: ok(u) for u in urls}, dcat_ap_compliant=True)
    assert dims(q) == {
        "findability": 100,
        "accessibility": 100,
        "interoperability": 110,
        "reusability": 75,
        "contextuality": 15,
    }
    assert q.total == 400
    assert q.rating is Rating.EXCELLENT
    assert q.unchecked == 0
    assert q.best_distribution == "https://data.example.org/dataset/air-quality/csv"
    assert [(d.distribution.rsplit("/", 1)[1], d.earned) for d in q.distributions] == [
        ("csv", 215),
        ("report", 200),
    ]
    rights = q.indicator("rights")
    assert (rights.earned, rights.met, rights.checked) == (0, False, True)
    assert q.indicator("accessUrlReachable").evidence.endswith("reachable (HTTP 200, ok)")
    assert all(r.checked for r in q.indicators)


def test_middling_dataset() -> None:
    # Findability     keyword 30 + theme 30 + spatial 0 + temporal 0                   =  60
    # Accessibility   accessURL reachable 50 + downloadURL 20
    #                 + downloadURL reachable 0 (not checked)                          =  70
    # Interoperability format 20 + media type 10 + vocabulary 10 + non-proprietary 0
    #                 (XLSX) + machine-readable 20 + DCAT-AP 0 (no verdict given)      =  60
    # Reusability     licence 20 (a local page, not a known licence: +0) + access
    #                 rights 0 + contact point 0 + publisher 0                          =  20
    # Contextuality   issued 5                                                          =   5
    # Total 215 -> sufficient (121-220); 60 points not checked (30 + 30)
    q = assess(
        ntriples("middling.ttl"),
        reachability={"https://portal.example.net/budget/": ok("https://portal.example.net/")},
    )
    assert dims(q) == {
        "findability": 60,
        "accessibility": 70,
        "interoperability": 60,
        "reusability": 20,
        "contextuality": 5,
    }
    assert q.total == 215
    assert q.rating is Rating.SUFFICIENT
    assert q.unchecked == 60
    unchecked = {r.key for r in q.indicators if not r.checked}
    assert unchecked == {"downloadUrlReachable", "dcatApCompliance"}
    assert q.dimension(Dimension.ACCESSIBILITY).unchecked == 30
    assert "not checked" in q.indicator("downloadUrlReachable").evidence
    assert q.indicator("nonProprietary").evidence == "XLSX: proprietary"
    assert "not a known licence" in q.indicator("licenceVocabulary").evidence


def test_bad_dataset() -> None:
    # Findability     keyword 30                                                        =  30
    # Accessibility   accessURL answered 404 (checked) 0, no downloadURL 0              =   0
    # Interoperability format 20 (a labelled node: present, but from no vocabulary and
    #                 in no format table) + not DCAT-AP compliant 0                     =  20
    # Reusability     access rights 10 (a literal: stated, not from the vocabulary)
    #                 + publisher 10                                                    =  20
    # Contextuality   0                                                                 =   0
    # Total 70 -> bad (0-120)
    q = assess(
        ntriples("bad.ttl"),
        reachability={"http://old.example.com/files/17": gone("http://old.example.com/files/17")},
        dcat_ap_compliant=False,
    )
    assert dims(q) == {
        "findability": 30,
        "accessibility": 0,
        "interoperability": 20,
        "reusability": 20,
        "contextuality": 0,
    }
    assert q.total == 70
    assert q.rating is Rating.BAD
    assert q.unchecked == 0
    access = q.indicator("accessUrlReachable")
    assert (access.met, access.checked) == (False, True)
    assert "HTTP 404" in access.evidence
    assert q.indicator("formatMediaTypeVocabulary").evidence.startswith("not from a vocabulary")
    assert q.indicator("accessRightsVocabulary").evidence == "'open' is not an EU access right"
    assert q.best_distribution is not None and q.best_distribution.startswith("_:")


def test_no_reachability_map_means_unchecked_not_failed() -> None:
    q = assess(ntriples("excellent.ttl"), dcat_ap_compliant=True)
    for key in ("accessUrlReachable", "downloadUrlReachable"):
        r = q.indicator(key)
        assert (r.earned, r.checked) == (0, False)
    assert q.total == 400 - 80
    assert q.unchecked == 80


def test_one_unreachable_url_fails_a_distribution_even_if_others_are_unchecked() -> None:
    data = ntriples("excellent.ttl")
    q = assess(data, reachability={"https://files.example.org/air-quality/": False})
    r = q.indicator("accessUrlReachable")
    assert (r.met, r.checked) == (False, True)
    assert r.evidence.endswith("not reachable")


_TWO = """
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
<https://d.example.org/ds> a dcat:Dataset ;
    dcat:distribution <https://d.example.org/ds/a>, <https://d.example.org/ds/b> .
# a: described well but no download URL: format 20 + media 10 + vocab 10 + non-prop 20
#    + machine 20 + licence 20 + known licence 10 = 110
<https://d.example.org/ds/a> dcat:accessURL <https://d.example.org/a/> ;
    dct:format <http://publications.europa.eu/resource/authority/file-type/CSV> ;
    dcat:mediaType <https://www.iana.org/assignments/media-types/text/csv> ;
    dct:license <http://spdx.org/licenses/CC-BY-4.0> .
# b: reachable, downloadable, nothing else: accessURL 50 + downloadURL 20 + reachable 30
#    + byte size 5 = 105
<https://d.example.org/ds/b> dcat:accessURL <https://d.example.org/b/> ;
    dcat:downloadURL <https://d.example.org/b/file> ;
    dcat:byteSize 10 .
"""


def _two() -> bytes:
    out = serialize(parse(_TWO.encode(), format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
    assert out is not None
    return out


def test_best_distribution_is_the_one_scoring_most_not_a_mix() -> None:
    links = ["https://d.example.org/a/", "https://d.example.org/b/", "https://d.example.org/b/file"]
    q = assess(_two(), reachability=dict.fromkeys(links, True))
    # a: 50 (its access URL is reachable too) + 110 = 160 beats b: 105
    assert q.best_distribution == "https://d.example.org/ds/a"
    assert [d.earned for d in q.distributions] == [160, 105]
    assert q.indicator("downloadUrl").earned == 0  # b's download URL is not borrowed
    assert q.indicator("byteSize").earned == 0
    assert q.dimension(Dimension.ACCESSIBILITY).earned == 50

    # without a's access URL reachable, a has 110 and b 105: still a
    q = assess(_two(), reachability={links[1]: True, links[2]: True, links[0]: False})
    assert [d.earned for d in q.distributions] == [110, 105]
    # only then b wins when a's licence is unknown: a 110 - 10 = 100 < b 105
    unknown = _two().replace(b"http://spdx.org/licenses/CC-BY-4.0", b"https://x.example/lic")
    q = assess(unknown, reachability={links[1]: True, links[2]: True, links[0]: False})
    assert q.best_distribution == "https://d.example.org/ds/b"
    assert q.indicator("licence").earned == 0  # a's licence is not borrowed either
    assert q.dimension(Dimension.ACCESSIBILITY).earned == 100


_TIE = """
@prefix dcat: <http://www.w3.org/ns/dcat#> .
@prefix dct: <http://purl.org/dc/terms/> .
<https://d.example.org/ds> a dcat:Dataset ;
    dcat:distribution <https://d.example.org/ds/z>, <https://d.example.org/ds/m> .
<https://d.example.org/ds/z> dct:rights <https://d.example.org/rights> .
<https://d.example.org/ds/m> dcat:byteSize 10 .
"""


def test_ties_go_to_the_first_distribution_iri() -> None:
    data = serialize(parse(_TIE.encode(), format=RdfFormat.TURTLE), format=RdfFormat.N_TRIPLES)
    assert data is not None
    q = assess(data)
    assert [d.earned for d in q.distributions] == [5, 5]
    assert q.best_distribution == "https://d.example.org/ds/m"
    assert (q.indicator("byteSize").earned, q.indicator("rights").earned) == (5, 0)


def test_dataset_without_distribution() -> None:
    data = (
        b"<https://d.example.org/x> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
        b" <http://www.w3.org/ns/dcat#Dataset> .\n"
    )
    q = assess(data, dcat_ap_compliant=True)
    assert q.total == 30
    assert q.best_distribution is None
    assert q.indicator("format").evidence == "the dataset has no dcat:distribution"


def test_graph_errors() -> None:
    with pytest.raises(QualityError, match="found 0"):
        assess(b"")
    with pytest.raises(QualityError, match="not valid N-Triples"):
        assess(b"<a> <b> .\n")
    with pytest.raises(QualityError, match="not described"):
        assess(ntriples("bad.ttl"), dataset_iri="https://nowhere.example/")
    q = assess(ntriples("bad.ttl"), dataset_iri="http://old.example.com/ds/17")
    assert q.dataset == "http://old.example.com/ds/17"


def test_media_type_stands_for_a_missing_format() -> None:
    data = _two().replace(
        b"<https://d.example.org/ds/a> <http://purl.org/dc/terms/format>",
        b"<https://d.example.org/ds/a> <http://example.org/nothing>",
    )
    q = assess(data)
    assert q.indicator("format").earned == 0
    assert q.indicator("machineReadable").evidence == "CSV is machine-readable"
    assert q.indicator("formatMediaTypeVocabulary").met


def test_generated_datasets_mapped_by_the_dcat_mapper() -> None:
    mapper = DcatMapper()
    ctx = MappingContext(base_iri="https://agg.example.org/", source="gen")
    for index in range(20):
        raw = RawRecord("gen", f"r{index}", "dcat", generate_dataset(index), "application/rdf+xml")
        (mapped,) = mapper.map(raw, ctx)
        urls = link_urls(mapped.ntriples)
        q = assess(
            mapped.ntriples,
            dataset_iri=mapped.dataset_iri,
            reachability=dict.fromkeys(urls, True),
            dcat_ap_compliant=True,
        )
        # everything but dct:rights (5) is there; proprietary-only or PDF/ZIP-only datasets
        # lose the format points of their best distribution
        assert q.total <= 400
        assert q.total >= 400 - 40
        assert q.rating is Rating.EXCELLENT
        assert q.unchecked == 0
