"""The dashboard as an operator meets it in the first hour (issue 28), over HTTP against a real
server on the harvested demo: notes are not errors and a job's kind agrees with its listing,
"harvest now" says whether a scheduler will take the request, the quality page counts only
what it measured and shows the MQA scale, every open rejection on one page, a rejected
record's every finding, times for people, one <h1> per page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
import requests
from dashboard_site import TOKEN, Site, served_site

from aggregator.config import load_settings
from aggregator.http import HttpClient
from aggregator.pipeline import run_source
from aggregator.store.records import RecordStore

BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with served_site(tmp_path_factory.mktemp("operator")) as s:
        yield s


def get(site: Site, path: str, **kw: object) -> requests.Response:
    r = requests.get(site.url + path.lstrip("/"), headers=BROWSER, timeout=60, **kw)  # type: ignore[arg-type]
    assert r.status_code == 200, (path, r.status_code)
    return r


def harvest(site: Site, source: str) -> int:
    settings = load_settings(site.config)
    with RecordStore(settings.store_path, settings.base_iri) as store:
        return run_source(settings, store, source, http=HttpClient(settings.http)).id


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_notes_are_not_errors_and_the_kind_follows_the_listing(site: Site) -> None:
    first = int(re.findall(r'href="/jobs/(\d+)"', get(site, "jobs?source=demo-oai").text)[-1])
    again = harvest(site, "demo-oai")  # from the checkpoint: incremental, succeeds with a note
    page = get(site, f"jobs/{again}").text
    assert "succeeded" in page
    facts = between(page, '<dl class="facts">', "</dl>")
    assert re.search(r'id="kind">incremental harvest', facts)
    assert "Listing: incremental" not in facts  # said once, as the kind
    # the note is a note, not an error
    assert "<dt>Error</dt>" not in facts and "<dt>Note</dt>" in facts
    assert re.search(r'<dd class="note">incremental run: absent records are not withdrawn', facts)
    # the first job listed everything: a full harvest, whatever was asked for
    first_facts = between(get(site, f"jobs/{first}").text, '<dl class="facts">', "</dl>")
    assert re.search(r'id="kind">full harvest', first_facts)
    assert "incremental harvest" not in first_facts
    # the jobs table and the overview card: a succeeded job's message is not in red
    table = get(site, "jobs?source=demo-oai").text
    row = between(table, f'href="/jobs/{again}"', "</tr>")
    assert '<td class="note">incremental run' in row and 'class="error"' not in row
    assert f'href="/jobs/{first}">#{first}</a> <span class="muted">full</span>' in table
    card = between(get(site, "").text, 'data-source="demo-oai"', "</section>")
    assert '<p class="note">incremental run' in card and 'class="error"' not in card


def test_a_failed_jobs_message_stays_an_error(site: Site) -> None:
    from aggregator.sources_file import add_source

    add_source(site.config, "gone", {"type": "rdf-dump", "url": "http://127.0.0.1:9/x.ttl"})
    job = harvest(site, "gone")
    page = get(site, f"jobs/{job}").text
    assert re.search(r'<dt>Error</dt><dd class="error">', page)
    row = between(get(site, "jobs?source=gone").text, f'href="/jobs/{job}"', "</tr>")
    assert '<td class="error">' in row


def _harvest_now(site: Site, source: str) -> str:
    r = requests.post(
        f"{site.url}admin/sources/{source}/harvest",
        headers={"authorization": f"Bearer {TOKEN}", **BROWSER},
        timeout=30,
    )
    assert r.status_code == 200 and "requested=" in r.url
    return between(r.text, 'id="requested">', "</p>")


def test_harvest_now_promises_a_start_only_with_a_scheduler(site: Site, tmp_path: Path) -> None:
    said = _harvest_now(site, "hostile")
    assert "the scheduler (process" in said and "starts it within seconds" in said
    assert re.search(r'id="scheduler">running \(process \d+\)', get(site, "sources/hostile").text)
    with served_site(tmp_path, scheduler=False) as alone:  # `serve --no-scheduler`
        said = unescape(_harvest_now(alone, "hostile"))
        assert "within seconds" not in said.split("it then")[0]
        assert "no scheduler runs for this data directory" in said
        assert f"aggregator -c {alone.config} scheduler" in said  # how to start one
        page = get(alone, "sources/hostile").text
        assert 'id="scheduler">not running' in page
        assert "harvest now requested" in page  # the request waits, visible


def test_quality_counts_what_it_measured_on_the_mqa_scale(site: Site) -> None:
    page = get(site, "quality").text
    # the demo has datasets without a download URL: that is "Download URL", not reachability
    shortcomings = between(page, "Most frequent shortcomings", "</ol>")
    assert "<li>" in shortcomings
    assert "reachable" not in shortcomings.lower()
    not_checked = between(page, 'id="not-checked">', "</p>")
    assert "Download URL reachable" in not_checked and "Access URL reachable" in not_checked
    assert re.search(r'id="mean-score">\d+ / 405<', page)
    per_source = between(page, "<tbody>", "</tbody>")
    assert "reachable" not in per_source.lower()
    # every score with its scale: the total and the five dimensions of each source
    assert len(re.findall(r'class="num score">\d+ / 405<', per_source)) == 3
    assert len(re.findall(r'class="num score">\d+ / (?:100|110|75|20)<', per_source)) == 15
