"""The harvest dashboard over HTTP (a real server on the harvested demo plus a hostile source):
every page renders in words with a strict CSP, errors group, filter and export, search and
facets work, the /sparql page serves browsers while clients keep their formats, and admin
actions need the administrator and a CSRF token."""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from dashboard_site import HOSTILE_TITLE, PASSWORD, TOKEN, Site, open_writer, served_site

from aggregator.config import load_settings

BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with served_site(tmp_path_factory.mktemp("dash")) as s:
        yield s


def get(site: Site, path: str, **kw: object) -> requests.Response:
    headers = {**BROWSER, **kw.pop("headers", {})}  # type: ignore[dict-item]
    return requests.get(site.url + path.lstrip("/"), headers=headers, timeout=60, **kw)  # type: ignore[arg-type]


def strict(page: requests.Response) -> None:
    """CSP without inline script or style; no inline script or style in the page either."""
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert not re.search(r"<script(?![^>]*\bsrc=)", page.text), "inline script"
    assert " style=" not in page.text and "<style" not in page.text


def job_ids(site: Site, source: str) -> list[int]:
    page = get(site, f"jobs?source={source}")
    return [int(n) for n in re.findall(r'href="/jobs/(\d+)"', page.text)]


def test_every_page_renders_in_words_with_a_strict_policy(site: Site) -> None:
    dump_job = job_ids(site, "demo-dump")[0]
    for path in (
        "",
        "sources",
        "sources/demo-oai",
        "jobs",
        f"jobs/{dump_job}",
        "quality",
        "datasets",
        "sparql",
        "login",
    ):
        page = get(site, path)
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        strict(page)
        if path != "sparql":  # the example queries name their prefixes
            assert "http://www.w3.org/ns/dcat#" not in page.text, f"a raw IRI on {path}"


def test_overview_says_how_each_source_is(site: Site) -> None:
    page = get(site, "")
    for name in ("demo-oai", "demo-dump", "hostile"):
        assert f'data-source="{name}"' in page.text
    assert "Last harvest succeeded at" in page.text
    assert re.search(r"\d+ active, \d+ withdrawn, \d+ rejected", page.text)
    assert page.text.count('<svg class="trend"') == 3  # a trend per source, drawn server-side
    # the scheduler's facts (manual sources: no run scheduled; breakers closed)
    assert page.text.count("Circuit breaker closed") == 3
    assert "next run: not scheduled" in page.text
    assert "o-added" in page.text
    ids = [int(n) for n in re.findall(r'<td><a href="/jobs/(\d+)">', page.text)]
    assert ids == sorted(ids, reverse=True) and ids  # newest first


def test_a_failed_job_shows_its_error_text(site: Site, tmp_path: Path) -> None:
    from aggregator.config.sources_file import add_source
    from aggregator.jobs.pipeline import run_source
    from aggregator.net.client import HttpClient

    # a source whose server is gone: the job fails with a message in words
    add_source(site.config, "gone", {"type": "rdf-dump", "url": "http://127.0.0.1:9/nothing.ttl"})
    settings = load_settings(site.config)
    with open_writer(settings) as store:
        job = run_source(settings, store, "gone", http=HttpClient(settings.http))
    assert job.status == "failed" and job.message
    page = get(site, "")
    card = page.text.split('data-source="gone"', 1)[1].split("</section>", 1)[0]
    assert "failing" in card and "Failing since" in card
    assert job.message.split(":")[0] in card.replace("&#39;", "'").replace("&quot;", '"')


def test_hostile_text_is_text(site: Site) -> None:
    for path in ("datasets", "datasets?q=injection"):
        page = get(site, path)
        assert HOSTILE_TITLE not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    link = re.search(r'<a href="([^"]+)" class="title">', get(site, "datasets?q=injection").text)
    assert link
    page = requests.get(link.group(1).replace("&amp;", "&"), headers=BROWSER, timeout=30)
    assert page.status_code == 200
    strict(page)
    assert HOSTILE_TITLE not in page.text and "<img" not in page.text
    assert "&lt;img src=x onerror=alert(2)&gt;" in page.text
    assert 'href="javascript:' not in page.text
    # labels in words, the extent for the map, the vendored Leaflet
    assert "Environment" in page.text and "CC BY 4.0" in page.text and ">CSV<" in page.text
    assert 'id="map"' in page.text and "data-extents=" in page.text
    assert get(site, "static/vendor/leaflet/leaflet.js").status_code == 200


def test_search_matches_words_and_facets_narrow(site: Site) -> None:
    everything = get(site, "datasets")
    total = int(re.search(r'id="hit-count">(\d+)', everything.text).group(1))  # type: ignore[union-attr]
    assert total >= 15
    water = get(site, "datasets?q=water")
    found = int(re.search(r'id="hit-count">(\d+)', water.text).group(1))  # type: ignore[union-attr]
    assert 0 < found < total
    assert "<mark>" in water.text.lower() or "water" in water.text.lower()
    none = get(site, "datasets?q=zzqqxx")
    assert 'id="hit-count">0 datasets' in none.text
    # FTS operators in the text are plain characters, not syntax errors
    assert get(site, 'datasets?q="NEAR(AND OR*').status_code == 200
    assert "Environment" in everything.text  # the theme facet, in words
    env = "http://publications.europa.eu/resource/authority/data-theme/ENVI"
    narrowed = get(site, "datasets", params={"theme": env})
    n = int(re.search(r'id="hit-count">(\d+)', narrowed.text).group(1))  # type: ignore[union-attr]
    assert 0 < n < total
    by_source = get(site, "datasets", params={"source": "hostile"})
    assert 'id="hit-count">1 dataset' in by_source.text


def test_job_errors_group_filter_and_export(site: Site) -> None:
    job = job_ids(site, "demo-dump")[-1]  # its first harvest rejected one record
    page = get(site, f"jobs/{job}")
    assert "Errors by step and rule" in page.text
    groups = re.findall(r'<td><a href="\?([^"]+)" title="([^"]+)">([^<]+)</a></td>', page.text)
    assert groups
    query, rule, words = groups[0]
    assert "://" not in words  # the rule in words on the page; whole in the CSV
    filtered = get(site, f"jobs/{job}?{query.replace('&amp;', '&')}")
    assert re.search(r'id="error-count">[1-9]\d* error', filtered.text)
    none = get(site, f"jobs/{job}", params={"q": "no-such-record-or-message"})
    assert 'id="error-count">0 errors' in none.text
    exported = get(site, f"jobs/{job}/errors.csv", params={"rule": rule})
    assert exported.headers["content-type"].startswith("text/csv")
    assert "attachment" in exported.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert rows and all(r["rule"] == rule for r in rows)
    # the rejected record's payload and findings one click away
    rejection = re.search(r'href="/rejections/(\d+)"', page.text)
    assert rejection
    detail = get(site, f"rejections/{rejection.group(1)}")
    assert detail.status_code == 200 and "Findings" in detail.text
    assert 'class="payload"' in detail.text and "/payload/" in detail.text
    strict(detail)


def test_sparql_page_for_browsers_formats_for_clients(site: Site) -> None:
    page = get(site, "sparql")
    assert (
        page.headers["vary"].split(", ")[0] == "Accept"
        and "<form" in page.text
        and "Examples" in page.text
    )
    plain = requests.get(site.url + "sparql", timeout=30)  # a protocol client: no HTML
    assert plain.status_code == 200 and not plain.headers["content-type"].startswith("text/html")
    assert "accept" in plain.headers["vary"].lower()
    q = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?d a <http://www.w3.org/ns/dcat#Dataset> } }"
    table = get(site, "sparql", params={"query": q})
    assert table.status_code == 200 and re.search(r"<td class=\"literal\">\d+", table.text)
    client = requests.get(
        site.url + "sparql",
        params={"query": q},
        headers={"accept": "application/sparql-results+json"},
        timeout=30,
    )
    assert client.headers["content-type"].startswith("application/sparql-results+json")
    refused = requests.get(
        site.url + "sparql", params={"query": q}, headers={"accept": "image/png"}, timeout=30
    )
    assert refused.status_code == 406 and refused.headers["vary"].split(", ")[0] == "Accept"
    bad = get(site, "sparql", params={"query": "SELECT nonsense"})
    assert bad.status_code == 400 and 'role="alert"' in bad.text


def login(site: Site) -> requests.Session:
    s = requests.Session()
    s.headers.update(BROWSER)
    r = s.post(
        site.url + "login",
        data={
            "csrf": login_csrf(s, site),
            "user": "admin",
            "password": PASSWORD,
            "next": "/sources",
        },
        timeout=30,
        allow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/sources"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    return s


def login_csrf(s: requests.Session, site: Site) -> str:
    """The login form's CSRF token (its nonce goes into the session's cookies; a logged-in
    page also has the logout form's token)."""
    page = s.get(site.url + "login", timeout=30).text
    found = re.search(
        r'action="/login"[^>]*>\s*<input type="hidden" name="csrf" value="(\w+)"', page
    )
    assert found
    return found.group(1)


def csrf_of(page: requests.Response) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found
    return found.group(1)


def test_admin_actions_need_the_administrator_and_csrf(site: Site) -> None:
    assert get(site, "admin/sources/new", allow_redirects=False).status_code == 303
    r = requests.post(site.url + "admin/sources/demo-oai/pause", timeout=30)
    assert r.status_code == 403
    anonymous = requests.Session()
    wrong = anonymous.post(
        site.url + "login",
        data={"csrf": login_csrf(anonymous, site), "user": "admin", "password": "nope"},
        timeout=30,
    )
    assert wrong.status_code == 401
    s = login(site)
    no_token = s.post(site.url + "admin/sources/demo-oai/pause", data={}, timeout=30)
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    forged = s.post(site.url + "admin/sources/demo-oai/pause", data={"csrf": "0" * 64}, timeout=30)
    assert forged.status_code == 403
    assert load_settings(site.config).sources["demo-oai"].enabled  # nothing changed
    # the next parameter never leads elsewhere
    r = s.post(
        site.url + "login",
        data={
            "csrf": login_csrf(s, site),
            "user": "admin",
            "password": PASSWORD,
            "next": "//evil.example/",
        },
        allow_redirects=False,
        timeout=30,
    )
    assert r.headers["location"] == "/"


def test_register_preview_edit_pause(site: Site) -> None:
    s = login(site)
    form = s.get(site.url + "admin/sources/new", timeout=30)
    token = csrf_of(form)
    before = site.config.read_text(encoding="utf-8")
    data = {
        "csrf": token,
        "name": "second-dump",
        "type": "rdf-dump",
        "url": site.sources["demo-dump"],
        "schedule": "weekly",
        "enabled": "on",
        "action": "preview",
    }
    preview = s.post(site.url + "admin/sources/new", data=data, timeout=60)
    assert preview.status_code == 200 and 'id="preview"' in preview.text
    assert re.search(r"\d+ would be stored", preview.text)
    # the demo dump's bad byte size: a rule its source must fix (a strict source rejects it)
    assert "would be stored, flagged" in preview.text
    assert site.config.read_text(encoding="utf-8") == before  # a preview writes nothing
    gone = {**data, "url": "http://127.0.0.1:9/nothing.ttl"}  # nothing listens there
    failed = s.post(site.url + "admin/sources/new", data=gone, timeout=60)
    assert failed.status_code == 200 and 'id="preview"' in failed.text
    assert re.search(r'<p class="error" role="alert">[^<]*127\.0\.0\.1', failed.text)
    bad = s.post(site.url + "admin/sources/new", data={**data, "url": "ftp://x"}, timeout=30)
    assert bad.status_code == 400 and 'role="alert"' in bad.text
    saved = s.post(site.url + "admin/sources/new", data={**data, "action": "save"}, timeout=30)
    assert saved.status_code == 200 and saved.url.endswith("/sources/second-dump")
    src = load_settings(site.config).sources["second-dump"]
    assert src.schedule == "weekly" and src.url == site.sources["demo-dump"]
    edit = s.get(site.url + "admin/sources/second-dump/edit", timeout=30)
    changed = s.post(
        site.url + "admin/sources/second-dump/edit",
        timeout=30,
        data={
            "csrf": csrf_of(edit),
            "type": "rdf-dump",
            "url": site.sources["demo-dump"],
            "schedule": "daily",
            "publisher": "Second publisher",
            "enabled": "on",
        },
    )
    assert changed.status_code == 200
    src = load_settings(site.config).sources["second-dump"]
    assert src.schedule == "daily" and src.publisher == "Second publisher"
    page = s.get(site.url + "sources/second-dump", timeout=30)
    paused = s.post(
        site.url + "admin/sources/second-dump/pause", data={"csrf": csrf_of(page)}, timeout=30
    )
    assert paused.status_code == 200 and "paused" in paused.text
    assert not load_settings(site.config).sources["second-dump"].enabled


def test_harvest_now_runs_a_job(site: Site) -> None:
    before = job_ids(site, "demo-oai")
    r = requests.post(
        site.url + "admin/sources/demo-oai/harvest",
        data={},
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=30,
        allow_redirects=False,
    )
    assert r.status_code == 303
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ids = job_ids(site, "demo-oai")
        if ids and ids[0] not in before:
            page = get(site, f"jobs/{ids[0]}")
            if "still running" not in page.text:
                assert "succeeded" in page.text
                return
        time.sleep(0.5)
    raise AssertionError("no new job for demo-oai")


def test_provenance_iris_send_browsers_to_the_dashboard(site: Site) -> None:
    job = job_ids(site, "demo-oai")[-1]
    r = get(site, f"job/{job}", allow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith(f"/jobs/{job}")
    assert r.headers["vary"].split(", ")[0] == "Accept"
    rdf = requests.get(f"{site.url}job/{job}", headers={"accept": "text/turtle"}, timeout=30)
    assert rdf.headers["content-type"].startswith("text/turtle") and "prov:" in rdf.text
    r = get(site, "source/demo-oai", allow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/sources/demo-oai")


def test_private_pages_need_the_login(tmp_path: Path) -> None:
    with served_site(tmp_path, public=False) as private:
        for path in ("", "datasets?q=water", "jobs", "sparql"):
            r = get(private, path, allow_redirects=False)
            assert r.status_code == 303 and "/login" in r.headers["location"], path
        # protocol clients and the republished catalogue stay open: only the dashboard is private
        assert requests.get(private.url + "sparql", timeout=30).status_code == 200
        assert get(private, "catalog.html").status_code == 200
        s = login(private)
        assert s.get(private.url + "datasets?q=water", timeout=30).status_code == 200
        token = requests.get(
            private.url + "jobs", headers={"authorization": f"Bearer {TOKEN}"}, timeout=30
        )
        assert token.status_code == 200 and "Jobs, newest first" in token.text
