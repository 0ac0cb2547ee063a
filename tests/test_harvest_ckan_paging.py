"""Keyset paging of the ckan harvester (aggregator.harvest.ckan._paging) against the local CKAN
peer: ties on metadata_modified across page ends, a millisecond fuller than a page, servers
that do not filter, sort or page as asked, and the Solr syntax the peer reads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from aggregator.config import HttpSettings, SourceConfig
from aggregator.core.errors import ConfigError
from aggregator.core.models import RawRecord
from aggregator.demo.peers.ckan import CkanPeer, MemoryCatalogue
from aggregator.demo.peers.ckan_data import small_package
from aggregator.demo.peers.ckan_query import QueryError, parse_fq, solr_time
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.ckan import CkanHarvester
from aggregator.harvest.ckan._paging import PageKey, Row, page_problem, solr_ms, tiebreak_of
from aggregator.net.client import HttpClient


def pid(n: int) -> str:
    return f"{n:04d}-pkg"


@pytest.fixture
def http() -> HttpClient:
    return HttpClient(
        HttpSettings(allow_private=True, retries=0, backoff=0.01, timeout=10.0),
        sleep=lambda s: None,
    )


def harvest(
    http: HttpClient, url: str, checkpoint: str | None = None, **options: Any
) -> tuple[list[RawRecord], Listing]:
    source = SourceConfig(name="portal", type="ckan", url=url, format="ckan", options=options)
    listing = Listing(incremental=checkpoint is not None)
    request = HarvestRequest(full=False, checkpoint=checkpoint, cancel=threading.Event())
    return list(CkanHarvester(source, http).list_records(request, listing)), listing  # type: ignore[arg-type]


@pytest.fixture
def ties() -> MemoryCatalogue:
    """30 packages: 0-9 a millisecond each; 10-21 one millisecond (a page and a half at
    rows=8), their microseconds running *against* their ids; 22-29 three to a millisecond."""
    packages = []
    for n in range(10):
        packages.append(small_package(pid(n), f"2024-01-01T00:00:00.{n:03d}000"))
    for n in range(10, 22):
        packages.append(small_package(pid(n), f"2024-01-01T00:00:01.000{99 - n:03d}"))
    for n in range(22, 30):
        packages.append(small_package(pid(n), f"2024-01-01T00:00:02.{n // 3:03d}{n % 3:03d}"))
    return MemoryCatalogue(packages)


@pytest.fixture
def server(ties: MemoryCatalogue) -> Iterator[tuple[PeerServer, CkanPeer]]:
    peer = CkanPeer(ties)
    with PeerServer(peer) as running:
        yield running, peer


def test_ties_on_metadata_modified_are_read_once_each_across_page_ends(
    http: HttpClient, server: tuple[PeerServer, CkanPeer]
) -> None:
    running, peer = server
    records, listing = harvest(http, running.url, rows=8)
    ids = [r.local_id for r in records]
    assert sorted(ids) == [pid(n) for n in range(30)] and len(ids) == len(set(ids))
    assert listing.complete and listing.seen == 30
    filters = [r.get("fq", "") for r in peer.requests]
    # a page that is all one millisecond is drained by id, then the listing goes past it
    drain = 'metadata_modified:[2024-01-01T00:00:01.000Z TO 2024-01-01T00:00:01.000Z] AND id:{"'
    assert any(f.startswith(drain) for f in filters), filters
    assert "metadata_modified:{2024-01-01T00:00:01.000Z TO *]" in filters
    assert any("drained" in n or "one millisecond" in n for n in listing.notes)


@pytest.mark.parametrize("rows", [2, 3, 5, 7, 11, 12, 13, 29, 30, 31])
def test_every_page_size_reads_every_package_once(
    http: HttpClient, server: tuple[PeerServer, CkanPeer], rows: int
) -> None:
    records, listing = harvest(http, server[0].url, rows=rows)
    assert sorted(r.local_id for r in records) == [pid(n) for n in range(30)]
    assert listing.complete


def test_a_server_capping_rows_is_paged_to_the_end(http: HttpClient, ties: MemoryCatalogue) -> None:
    """The portal answers 4 rows when asked for 10 (ckan.search.rows_max): a short page is not
    the end; the end is a page holding all the server counts."""
    with PeerServer(CkanPeer(ties, rows_max=4)) as running:
        records, listing = harvest(http, running.url, rows=10)
    assert sorted(r.local_id for r in records) == [pid(n) for n in range(30)]
    assert listing.complete


def test_a_server_that_does_not_sort_truncates(http: HttpClient, ties: MemoryCatalogue) -> None:
    class Unsorted(MemoryCatalogue):
        def search(self, *args: Any, **kwargs: Any) -> tuple[int, list[dict[str, Any]]]:
            count, page = super().search(*args, **kwargs)
            return count, page[::-1]

    with PeerServer(CkanPeer(Unsorted(ties.packages.values()))) as running:
        records, listing = harvest(http, running.url, rows=8)
    assert not listing.complete and len(records) == 8
    assert "does not sort by metadata_modified asc, id asc" in (listing.truncated_reason or "")


def test_packages_without_metadata_modified_are_read_where_solr_sorts_them(
    http: HttpClient, ties: MemoryCatalogue
) -> None:
    """Solr sorts a missing date first: such packages are on the first page (no range
    filter yet) before the dated ones, and read there; a page of nothing but undated
    packages cannot be paged past."""
    for n in range(3):
        ties.put(small_package(f"undated-{n}", ""))
    with PeerServer(CkanPeer(ties)) as running:
        records, listing = harvest(http, running.url, rows=8)
        assert listing.complete and len(records) == 33
        assert [r.local_id for r in records[:3]] == ["undated-0", "undated-1", "undated-2"]
        records, listing = harvest(http, running.url, rows=3)
    assert not listing.complete and len(records) == 3
    assert "'undated-0' has no readable metadata_modified" in (listing.truncated_reason or "")
    rows: list[Row] = [("2024-01-01T00:00:00.000Z", "a"), (None, "b")]
    assert page_problem(rows, None, True, "id") is None  # the last page: nothing to page past
    assert "'b' has no readable" in (page_problem(rows, None, False, "id") or "")


def test_the_name_may_break_ties_instead_of_the_id(
    http: HttpClient, server: tuple[PeerServer, CkanPeer]
) -> None:
    running, peer = server
    records, listing = harvest(http, running.url, rows=8, sort="metadata_modified asc, name asc")
    assert sorted(r.local_id for r in records) == [pid(n) for n in range(30)]
    assert listing.complete
    assert any('AND name:{"p-' in r.get("fq", "") for r in peer.requests)


def test_our_own_filter_is_kept_on_every_page(
    http: HttpClient, server: tuple[PeerServer, CkanPeer], ties: MemoryCatalogue
) -> None:
    running, peer = server
    for n in (3, 12, 25):
        ties.put({**ties.packages[pid(n)], "organization": {"name": "north"}})
    records, listing = harvest(http, running.url, rows=2, fq="organization:north")
    assert [r.local_id for r in records] == [pid(3), pid(12), pid(25)]
    assert listing.complete
    assert peer.requests[1]["fq"] == (
        "(organization:north) AND (metadata_modified:[2024-01-01T00:00:01.000Z TO *])"
    )


def test_a_sort_the_paging_cannot_use_is_a_config_error() -> None:
    for sort in ("metadata_modified desc, id asc", "id asc", "metadata_modified asc, title asc"):
        source = SourceConfig(name="p", type="ckan", url="http://x/", options={"sort": sort})
        with pytest.raises(ConfigError, match="sort must be 'metadata_modified asc, id asc'"):
            CkanHarvester.check_config(source)
    assert tiebreak_of(" metadata_modified  ASC ,id asc") == "id"


def test_keys_are_solr_milliseconds() -> None:
    assert solr_ms("2015-09-15T13:17:51.405474") == "2015-09-15T13:17:51.405Z"
    assert solr_ms("2015-09-15T13:17:51") == "2015-09-15T13:17:51.000Z"
    assert solr_ms("2015-09-15T15:17:51.4+02:00") == "2015-09-15T13:17:51.400Z"
    assert solr_ms("yesterday") is None and solr_ms(None) is None
    key = PageKey("2024-01-01T00:00:01.000Z", after='a"b')
    assert key.filter("id") == (
        "metadata_modified:[2024-01-01T00:00:01.000Z TO 2024-01-01T00:00:01.000Z]"
        ' AND id:{"a\\"b" TO *]'
    )
    assert PageKey("2024-01-01T00:00:01.000Z", inclusive=False).filter("id") == (
        "metadata_modified:{2024-01-01T00:00:01.000Z TO *]"
    )


# --- the Solr syntax the peer reads ---------------------------------------------------------


def test_the_peer_reads_ranges_and_terms_as_solr_does() -> None:
    package = small_package("abc", "2024-01-01T00:00:01.000999") | {
        "organization": {"name": "north"}
    }
    holds = {
        "metadata_modified:[2024-01-01T00:00:01.000Z TO *]": True,  # milliseconds: .000999 = .000
        "metadata_modified:{2024-01-01T00:00:01.000Z TO *]": False,
        "metadata_modified:[* TO 2024-01-01T00:00:01Z]": True,
        'metadata_modified:"2024-01-01T00:00:01.000Z"': True,
        r"metadata_modified:2024-01-01T00\:00\:01.000Z": True,
        'id:{"abb" TO *]': True,
        'id:{"abc" TO *]': False,
        "+organization:north +id:abc": True,
        "(organization:north) AND (id:[* TO abb])": False,
        "*:*": True,
    }
    for fq, expected in holds.items():
        assert parse_fq(fq).matches(package) is expected, fq
    for bad in ("id:a OR id:b", "-id:abc", "(id:abc", "metadata_modified:[soon TO *]", "id:[a"):
        with pytest.raises(QueryError):
            parse_fq(bad)
    assert solr_time("2024-01-01T00:00:01.000999Z") == solr_time("2024-01-01T00:00:01Z")


def test_the_peer_answers_a_query_it_cannot_read_with_a_409(
    server: tuple[PeerServer, CkanPeer],
) -> None:
    url = server[0].url + "api/3/action/package_search"
    answer = requests.get(url, params={"fq": "id:a OR id:b"}, timeout=10)
    assert answer.status_code == 409 and answer.json()["success"] is False
    assert "Search error" in answer.json()["error"]["message"]
    page = requests.get(
        url,
        params={"fq": "metadata_modified:{2024-01-01T00:00:01.000Z TO *]", "rows": "100"},
        timeout=10,
    ).json()["result"]
    assert page["count"] == 8  # 22-29: the twelve of 00:00:01.000 are not after it
