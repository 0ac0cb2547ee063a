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
from dashboard_site import TOKEN, Site, open_writer, served_site

from aggregator.config import load_settings
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient

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
    with open_writer(settings) as store:
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
    from aggregator.config.sources_file import add_source

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


def _waf_with_a_record_without_lineage(site: Site) -> str:
    """A WAF source (iso19139, the default GEMINI chain then SHACL) whose one record breaks
    a GEMINI obligation: rejected at a payload step. Returns the record's local id (its file
    identifier)."""
    from contextlib import ExitStack
    from datetime import UTC, datetime

    from aggregator.config.sources_file import add_source
    from aggregator.core.xml import parse_xml
    from aggregator.demo.peers.gemini_samples import bundled_gemini_records
    from aggregator.demo.peers.server import PeerServer
    from aggregator.demo.peers.waf import WafApp
    from aggregator.harvest.gemini import record_facts

    name, doc = bundled_gemini_records()[0]
    app = WafApp()
    app.put(name, re.sub(rb"<gmd:lineage>.*?</gmd:lineage>", b"", doc, flags=re.S),
            datetime(2026, 3, 14, tzinfo=UTC))  # fmt: skip
    with ExitStack() as stack:
        server = stack.enter_context(PeerServer(app))
        table = {"type": "waf", "url": f"{server.url}waf/", "format": "iso19139"}
        add_source(site.config, "waf-iso", {**table, "schedule": "manual"})
        harvest(site, "waf-iso")
    return str(record_facts(parse_xml(doc)).file_identifier)


def test_every_open_rejection_on_one_page_paged_and_filtered(site: Site) -> None:
    waf_record = _waf_with_a_record_without_lineage(site)
    nav = between(get(site, "").text, '<nav aria-label="Main">', "</nav>")
    assert 'href="/rejections"' in nav
    page = get(site, "rejections").text
    assert re.search(r'id="rejection-count">2 open rejections', page)
    rows = between(page, "<tbody>", "</tbody>")
    assert "demo-dump" in rows and "waf-iso" in rows  # across sources
    assert waf_record in rows and "gemini-2.3" in rows and "Lineage" in rows  # step, why
    ids = [int(n) for n in re.findall(r'href="/rejections/(\d+)"', rows)]
    assert ids == sorted(ids, reverse=True) and len(ids) == 2  # newest first
    # filtered by source, by step
    only = get(site, "rejections", params={"source": "demo-dump"}).text
    assert 'id="rejection-count">1 open rejection from demo-dump' in only
    assert "waf-iso" not in between(only, "<tbody>", "</tbody>")
    step = get(site, "rejections", params={"stage": "gemini-2.3"}).text
    assert waf_record in step and "demo-dump</a></td>" not in step
    # paged by keys: one a page, the next page starts below the last id shown
    first = get(site, "rejections?source=&stage=&before=").text
    assert first.count('href="/rejections/') >= 2
    older = get(site, f"rejections?before={ids[0]}").text
    assert f'href="/rejections/{ids[1]}"' in older and f'href="/rejections/{ids[0]}"' not in older
    # the source's card and page link to its open rejections
    card = between(get(site, "").text, 'data-source="demo-dump"', "</section>")
    assert 'href="/rejections?source=demo-dump"' in card


def test_a_rejected_record_shows_the_findings_of_every_step(site: Site) -> None:
    page = get(site, "rejections", params={"source": "demo-dump"}).text
    rid = re.search(r'href="/rejections/(\d+)"', between(page, "<tbody>", "</tbody>"))
    assert rid
    detail = get(site, f"rejections/{rid.group(1)}").text
    findings = between(detail, '<table class="errors findings">', "</table>")
    steps = set(re.findall(r'<tr class="sev-\w+"><td>([^<]+)</td>', findings))
    severities = set(re.findall(r'<tr class="sev-(\w+)">', findings))
    # rejected by SHACL (the byte size "412 kB"); its other findings are shown too
    assert "shacl" in steps, steps
    assert "violation" in severities and severities - {"violation"}, severities
    assert re.search(r'id="finding-count">\d+ findings of every step that ran: 1 violation', detail)
    # when it was rejected, for people, the full value kept in the element
    stamp = re.search(r'<dt>Rejected since</dt><dd><time datetime="([^"]+)" title="\1">'
                      r"(\d{4}-\d\d-\d\d \d\d:\d\d UTC)</time>", detail)  # fmt: skip
    assert stamp and stamp.group(1).startswith(stamp.group(2)[:10])


def test_times_are_for_people_with_the_full_value_kept(site: Site) -> None:
    link = re.search(r'<a href="([^"]+)" class="title">', get(site, "datasets?q=river").text)
    assert link
    page = requests.get(unescape(link.group(1)), headers=BROWSER, timeout=30).text
    provenance = between(page, "<h2>Provenance</h2>", "</dl>")
    times = re.findall(r'<time datetime="([^"]+)" title="\1">([^<]+)</time>', provenance)
    assert len(times) >= 2  # in the catalogue since, last changed here (and the datestamp)
    for full, shown in times:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", shown), shown
        assert "." not in shown and "T" in full
    assert not re.search(r">\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", provenance)  # no raw stamp shown
    jobs = get(site, "jobs").text
    assert re.search(
        r'<td><time datetime="[^"]+T[^"]+" title="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d UTC', jobs
    )


def test_one_h1_on_every_page(site: Site) -> None:
    jobs = get(site, "jobs?source=demo-dump").text
    job = re.findall(r'href="/jobs/(\d+)"', jobs)[-1]
    rejection = re.search(r'href="/rejections/(\d+)"', get(site, "rejections").text)
    assert rejection
    rhine = re.search(r'<a href="([^"]+)" class="title">', get(site, "datasets?q=rhine").text)
    assert rhine
    dataset = requests.get(unescape(rhine.group(1)), headers=BROWSER, timeout=30).text
    assert "Oppervlaktewaterkwaliteit" in dataset  # titled in two languages: one heading
    pages = {"dataset": dataset}
    for path in ("", "sources", "sources/demo-dump", "jobs", f"jobs/{job}", "rejections",
                 f"rejections/{rejection.group(1)}", "quality", "datasets", "sparql", "login",
                 "sources/no-such-source"):  # fmt: skip
        r = requests.get(site.url + path, headers=BROWSER, timeout=60)
        pages[path] = r.text
    for path, text in pages.items():
        assert len(re.findall(r"<h1[\s>]", text)) == 1, path
    other = between(dataset, '<ul class="other-titles"', "</ul>")
    assert 'lang="nl"' in other and "Oppervlaktewaterkwaliteit" in other


def test_search_results_come_before_the_facets(site: Site) -> None:
    page = get(site, "datasets").text
    assert 0 < page.index('<ol class="hits"') < page.index('<aside class="facets"')
    assert 'href="#facets"' in page  # a phone's way to the filters


def test_the_map_has_a_world_outline_to_draw(site: Site) -> None:
    link = re.search(r'<a href="([^"]+)" class="title">', get(site, "datasets?q=injection").text)
    assert link
    page = requests.get(unescape(link.group(1)), headers=BROWSER, timeout=30).text
    found = re.search(r'id="map"[^>]* data-world="([^"]+)"', page)
    assert found, "no world outline: run make (tools/vendor_world.py)"
    outline = get(site, found.group(1)).json()
    kinds = [f["properties"]["kind"] for f in outline["features"]]
    assert kinds == ["land", "borders"]
    land = outline["features"][0]["geometry"]
    assert land["type"] == "MultiPolygon" and len(land["coordinates"]) > 100
    for polygon in land["coordinates"]:
        for ring in polygon:
            assert ring[0] == ring[-1]  # closed rings
            assert all(-180 <= x <= 180 and -90 <= y <= 90 for x, y in ring)


@pytest.mark.parametrize(
    ("serve", "error"),
    [
        ('map_tiles = "https://t.example.org/{z}/{x}/{y}.png"', "map_attribution is needed"),
        ('map_tiles = "https://t.example.org/tiles.png"\nmap_attribution = "x"', "{z}"),
        ('map_tiles = "https://t.example.org;/{z}/{x}/{y}"\nmap_attribution = "x"', "{z}"),
        ('map_tiles = "javascript:alert(1)//{z}/{x}/{y}"\nmap_attribution = "x"', "{z}"),
    ],
)
def test_a_tile_server_needs_a_url_template_and_its_attribution(
    tmp_path: Path, serve: str, error: str
) -> None:
    from aggregator.core.errors import ConfigError

    config = tmp_path / "aggregator.toml"
    config.write_text(f"[serve]\n{serve}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_settings(config)
    good = (
        '[serve]\nmap_tiles = "https://{s}.t.example.org/{z}/{x}/{y}.png"\nmap_attribution = "T"\n'
    )
    config.write_text(good, encoding="utf-8")
    assert load_settings(config).serve.map_attribution == "T"
