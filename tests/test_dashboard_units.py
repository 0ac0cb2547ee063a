"""The dashboard's parts on their own: password and token hashes, sessions and CSRF tokens,
the login state (sessions closed, attempts counted per client),
spatial extents, the search index (catch-up, withdrawal, query text as plain words), rules
and vocabulary terms in words."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import requests
from dashboard_site import admin_site

from aggregator.core.errors import ConfigError
from aggregator.serve.dashboard import search
from aggregator.serve.dashboard.auth import (
    SESSION_TTL,
    Auth,
    SessionCookie,
    bearer_token,
    check_hash_setting,
    hash_secret,
    new_id,
    verify_secret,
)
from aggregator.serve.dashboard.auth_state import (
    AuthState,
    Refused,
    client_key,
    forwarded_client,
    parse_networks,
)
from aggregator.serve.dashboard.geometry import from_geojson, from_wkt, parse_geometry
from aggregator.serve.dashboard.job_errors import _defuse, rule_label
from aggregator.serve.dashboard.labels import property_label, term_label
from aggregator.serve.dashboard.search import SearchIndex, fts_query, make_snippet
from aggregator.serve.dashboard.search_keeper import SearchKeeper
from aggregator.serve.dashboard.sparql_page import wants_html
from aggregator.store.migrations import upgrade
from aggregator.store.packing import pack_graph


def test_hashes_verify_only_their_secret() -> None:
    stored = hash_secret("s3cret")
    assert stored.startswith("scrypt$") and "s3cret" not in stored
    assert verify_secret("s3cret", stored)
    assert not verify_secret("s3cret ", stored)
    assert not verify_secret("s3cret", "scrypt$1$2$3$zz$zz")  # malformed: matches nothing
    assert hash_secret("s3cret") != stored  # salted
    check_hash_setting(stored, "admin_password_hash")
    with pytest.raises(ConfigError):
        check_hash_setting("s3cret", "admin_password_hash")  # a password where a hash goes
    with pytest.raises(ConfigError):
        hash_secret("")


def test_sessions_expire_and_csrf_tokens_belong_to_their_session() -> None:
    auth = Auth(b"k" * 32, "admin", hash_secret("pw"), hash_secret("tok"))
    assert auth.password_ok("admin", "pw")
    assert not auth.password_ok("admin", "wrong") and not auth.password_ok("root", "pw")
    first, second = new_id(), new_id()
    cookie = auth.session_cookie(first, 1000 + SESSION_TTL)
    assert auth.read_session_cookie(cookie, now=1001.0) == SessionCookie(first, 1000 + SESSION_TTL)
    assert auth.read_session_cookie(cookie, now=1000.0 + 9 * 3600) is None  # expired
    sid, expiry, sig = cookie.split("|")
    assert auth.read_session_cookie(f"{sid}|{int(expiry) + 9999}|{sig}", now=1001.0) is None
    assert auth.read_session_cookie(f"{second}|{expiry}|{sig}", now=1001.0) is None  # forged
    other = Auth(b"x" * 32, "admin", auth.password_hash, auth.token_hash)
    assert other.read_session_cookie(cookie, now=1001.0) is None  # another key
    for junk in ("", "|", "||", "é|1|é", f"é|{expiry}|{sig}", cookie + "é"):
        assert auth.read_session_cookie(junk, now=1001.0) is None
    token = auth.csrf_token(first)
    tampered = token[:-1] + ("1" if token.endswith("0") else "0")  # always another token
    assert auth.csrf_ok(first, token) and not auth.csrf_ok(first, tampered)
    assert not auth.csrf_ok(second, token) and not auth.csrf_ok(first, "é" * 64)
    assert not auth.csrf_ok(first, None) and not auth.csrf_ok(first, "")
    assert auth.token_ok("tok") and not auth.token_ok("pw") and not auth.token_ok("é")
    assert bearer_token("Bearer tok") == "tok" and bearer_token("bearer  tok ") == "tok"
    assert bearer_token("Basic tok") is None and bearer_token(None) is None
    assert bearer_token("Bearer ") is None


def test_the_login_forms_token_belongs_to_its_nonce() -> None:
    auth = Auth(b"k" * 32, "admin", hash_secret("pw"), "")
    nonce = new_id()
    token = auth.login_csrf_token(nonce)
    assert auth.login_csrf_ok(nonce, token)
    assert not auth.login_csrf_ok(new_id(), token) and not auth.login_csrf_ok(None, token)
    assert not auth.login_csrf_ok(nonce, None) and not auth.login_csrf_ok(nonce, "é")
    assert not auth.login_csrf_ok("é" * 32, token) and Auth.login_nonce("zz") is None
    assert token != auth.csrf_token(nonce)  # a login token is no session's CSRF token


def test_sessions_close_and_attempts_are_counted_per_client(tmp_path: Path) -> None:
    state = AuthState(tmp_path)
    state.open_session("a" * 32, "admin", expires=2000.0, now=1000.0)
    assert state.session_user("a" * 32, now=1500.0) == "admin"
    assert state.session_user("a" * 32, now=2001.0) is None
    AuthState(tmp_path).close_session("a" * 32)  # another serving process
    assert state.session_user("a" * 32, now=1500.0) is None
    begun = [state.begin_attempt("10.0.0.1", 100.0 + i, limit=3, window=60) for i in range(3)]
    assert all(isinstance(b, int) for b in begun)
    refused = state.begin_attempt("10.0.0.1", 110.0, limit=3, window=60)
    assert refused == Refused(retry_after=50)  # the first attempt leaves the window at 160
    assert isinstance(state.begin_attempt("10.0.0.2", 110.0, limit=3, window=60), int)
    state.succeeded(int(begun[0]))  # a success counts for nothing
    assert isinstance(state.begin_attempt("10.0.0.1", 111.0, limit=3, window=60), int)
    assert isinstance(state.begin_attempt("10.0.0.1", 200.0, limit=3, window=60), int)
    assert client_key("2001:db8::1:2:3:4") == client_key("2001:db8::9") == "2001:db8::/64"
    assert client_key("::ffff:10.0.0.1") == "10.0.0.1" and client_key(None) == "unknown"


def test_the_client_behind_trusted_proxies() -> None:
    proxies = parse_networks("127.0.0.1, 10.0.0.0/8 ,", "trusted_proxies")
    assert forwarded_client("127.0.0.1", "192.0.2.1, 10.1.2.3", proxies) == "192.0.2.1"
    assert forwarded_client("10.9.9.9", "forged, 192.0.2.1", proxies) == "192.0.2.1"
    assert forwarded_client("10.9.9.9", "192.0.2.1, junk", proxies) == "10.9.9.9"
    assert forwarded_client("10.9.9.9", "10.1.1.1", proxies) == "10.9.9.9"  # only proxies
    assert forwarded_client("192.0.2.7", "192.0.2.1", proxies) == "192.0.2.7"  # not trusted
    assert forwarded_client("127.0.0.1", None, proxies) == "127.0.0.1"
    assert forwarded_client("127.0.0.1", "192.0.2.1", ()) == "127.0.0.1"
    with pytest.raises(ConfigError, match=r"'proxy\.example' is not an address"):
        parse_networks("127.0.0.1, proxy.example", "trusted_proxies")


def test_extents_become_geojson_or_nothing() -> None:
    poly = from_wkt("POLYGON((3.3 50.7, 7.2 50.7, 7.2 53.6, 3.3 53.6, 3.3 50.7))")
    assert poly == {
        "type": "Polygon",
        "coordinates": [[[3.3, 50.7], [7.2, 50.7], [7.2, 53.6], [3.3, 53.6], [3.3, 50.7]]],
    }
    crs84 = "<http://www.opengis.net/def/crs/OGC/1.3/CRS84> POINT(4.35 50.85)"
    assert from_wkt(crs84) == {"type": "Point", "coordinates": [4.35, 50.85]}
    assert from_wkt("ENVELOPE(-5, 2, 56, 49)") is not None
    multi = from_wkt("MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)), ((5 5, 6 5, 6 6, 5 5)))")
    assert multi is not None and len(multi["coordinates"]) == 2
    assert from_wkt("POLYGON((300 0, 301 0, 301 1, 300 0))") is None  # out of range
    assert from_wkt("<http://www.opengis.net/def/crs/EPSG/0/27700> POINT(1 2)") is None
    assert from_wkt("LINESTRING(0 0, 1 1)") is None
    assert from_geojson('{"type": "Point", "coordinates": [1, 2]}') is not None
    assert from_geojson('{"type": "Point", "coordinates": [1, "x"]}') is None
    assert from_geojson("not json") is None
    assert parse_geometry('{"type":"Point","coordinates":[1,2]}', None) is not None


def test_search_text_is_words_never_syntax() -> None:
    assert fts_query("river water") == '"river" "water"*'
    assert fts_query('NEAR("x" OR y*') == '"NEAR" "x" "OR" "y"*'
    assert fts_query("  ") == ""


def _state(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    upgrade(db)
    return db


def _put(db: sqlite3.Connection, rid: int, status: str, modified: str, title: str) -> None:
    iri = f"https://example.org/ds/{rid}"
    nt = (
        f'<{iri}> <http://purl.org/dc/terms/title> "{title}"@en .\n'
        f'<{iri}> <http://www.w3.org/ns/dcat#keyword> "kw{rid}x" .\n'
        f"<{iri}> <http://www.w3.org/ns/dcat#theme> "
        "<http://publications.europa.eu/resource/authority/data-theme/ENVI> .\n"
    ).encode()
    db.execute(
        "INSERT OR REPLACE INTO records (id, source, local_id, record_iri, dataset_iri, status,"
        " first_seen, modified, ntriples) VALUES (?, 's', ?, ?, ?, ?, ?, ?, ?)",
        (rid, str(rid), f"{iri}/r", iri, status, modified, modified, pack_graph(nt)),
    )


def test_search_index_follows_the_records(tmp_path: Path) -> None:
    db = _state(tmp_path / "state.sqlite3")
    for n in range(1, 1201):  # more than a catch-up batch
        _put(db, n, "active", f"2026-01-01T00:00:{n % 60:02d}.{n:06d}Z", f"River {n} water")
    index = SearchIndex(tmp_path, tmp_path / "state.sqlite3")
    found = index.search(db, "river", {})
    assert found.total == 1200
    assert index.catch_up(db) == 0  # nothing new: one indexed query
    assert found.facets["theme"][0].label == "Environment"
    assert index.search(db, "kw7x", {}).total == 1
    _put(db, 7, "withdrawn", "2026-02-01T00:00:00.000000Z", "River 7 water")
    _put(db, 8, "active", "2026-02-01T00:00:01.000000Z", "Lake eight")
    assert index.search(db, "kw7x", {}).total == 0  # withdrawn: gone from the index
    assert index.search(db, "lake", {}).total == 1 and index.search(db, "river", {}).total == 1198
    # facet counts over the matches: more than half of the index (whole minus the rest)...
    river = index.search(db, "river", {})
    assert [(f.label, f.count) for f in river.facets["theme"]] == [("Environment", 1198)]
    assert [(f.value, f.count) for f in river.facets["source"]] == [("s", 1198)]
    # ... and fewer (counted directly)
    lake = index.search(db, "lake", {})
    assert [(f.label, f.count) for f in lake.facets["theme"]] == [("Environment", 1)]
    assert lake.hits[0].title == "Lake eight"
    narrowed = index.search(db, "", {"source": ["s"], "theme": ["nope"]})
    assert narrowed.total == 0
    # a new reader (another serving process) shares the file and finds it up to date
    again = SearchIndex(tmp_path, tmp_path / "state.sqlite3")
    assert again.catch_up(db) == 0 and again.search(db, "lake", {}).total == 1


THEMES = "http://publications.europa.eu/resource/authority/data-theme/"


def _put_themed(
    db: sqlite3.Connection, rid: int, status: str, title: str, themes: str, step: int
) -> None:
    iri = f"https://example.org/ds/{rid}"
    nt = f'<{iri}> <http://purl.org/dc/terms/title> "{title}"@en .\n' + "".join(
        f"<{iri}> <http://www.w3.org/ns/dcat#theme> <{THEMES}{t}> .\n" for t in themes.split()
    )
    modified = f"2026-{1 + step:02d}-01T00:00:00.{rid:06d}Z"  # a later step, a later stamp
    db.execute(
        "INSERT OR REPLACE INTO records (id, source, local_id, record_iri, dataset_iri, status,"
        " first_seen, modified, ntriples) VALUES (?, 's', ?, ?, ?, ?, ?, ?, ?)",
        (rid, str(rid), f"{iri}/r", iri, status, modified, modified, pack_graph(nt.encode())),
    )


def test_facet_counts_follow_records_that_change_their_facets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Facets are counted and filtered through shared facet sets (search_facets.py): the
    counts, totals and pages of every kind of search equal the records' own after records
    change their facets or go away."""
    db = _state(tmp_path / "state.sqlite3")
    kept: dict[int, tuple[str, str, int]] = {}  # the truth: id -> (title, themes, step)

    def put(rid: int, title: str, themes: str, status: str = "active", step: int = 0) -> None:
        _put_themed(db, rid, status, title, themes, step)
        if status == "active":
            kept[rid] = (title, themes, step)
        else:
            kept.pop(rid, None)

    for n in range(1, 301):
        put(n, f"{'River' if n % 2 else 'Lake'} {n}", ["ENVI", "AGRI", "ENVI AGRI"][n % 3])
    index = SearchIndex(tmp_path, tmp_path / "state.sqlite3")

    def matching(word: str, theme: str | None) -> list[int]:
        """Ids of the active records found, newest first (their step, then their id)."""
        found = [
            (step, rid)
            for rid, (title, themes, step) in kept.items()
            if word.lower() in title.lower() and (theme is None or theme in themes.split())
        ]
        return [rid for _, rid in sorted(found, reverse=True)]

    def check() -> None:
        for word in ("river", "lake", ""):  # half the index, the other half, all of it
            for theme in (None, "AGRI", "TRAN"):
                chosen = {"theme": [THEMES + theme]} if theme else {}
                found = index.search(db, word, chosen, limit=30)
                ids = matching(word, theme)
                counts: dict[str, int] = {}
                for rid in ids:
                    for t in kept[rid][1].split():
                        counts[THEMES + t] = counts.get(THEMES + t, 0) + 1
                assert {f.value: f.count for f in found.facets["theme"]} == counts, (word, theme)
                assert found.total == len(ids), (word, theme)
                if not word:  # filters alone: newest first, walked or read through the sets
                    assert [h.record_id for h in found.hits] == ids[:30], theme
        assert index.search(db, "river", {}).facets["source"][0].count == len(
            matching("river", None)
        )

    for rare in (1, 10**9):  # every filter walks the documents / is read through its sets
        monkeypatch.setattr(search, "RARE_FILTER", rare)
        check()
    for n in range(1, 31):  # withdrawn
        put(n, f"River {n}", "ENVI", status="withdrawn", step=1)
    for n in range(31, 91):  # their themes change: a set of their own, then an existing one
        put(n, f"River {n}", "TRAN" if n < 61 else "AGRI", step=1)
    put(1, "Lake one", "TRAN ENVI", step=2)  # back, with a set no other record has
    for rare in (1, 10**9):
        monkeypatch.setattr(search, "RARE_FILTER", rare)
        check()
    assert index.search(db, "lake", {"theme": [THEMES + "TRAN"]}).total == 1
    assert index.search(db, "", {"theme": [THEMES + "TRAN"], "source": ["s"]}).total == 31
    assert index.search(db, "", {"theme": [THEMES + "TRAN"], "source": ["other"]}).total == 0
    index.rebuild(db)  # store reindex: new ids for every value and set
    check()


def test_an_index_of_an_older_layout_is_dropped_its_space_given_back_and_built_again(
    tmp_path: Path,
) -> None:
    db = _state(tmp_path / "state.sqlite3")
    for n in range(1, 6):
        _put(db, n, "active", f"2026-01-01T00:00:0{n}.000000Z", f"River {n} water")
    older = sqlite3.connect(tmp_path / "search.sqlite3")
    older.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    older.execute("INSERT INTO meta VALUES ('schema', '3')")
    older.execute("CREATE TABLE record_facets (record_id INTEGER, facet_id INTEGER)")
    older.executemany("INSERT INTO record_facets VALUES (?, ?)", ((i, i) for i in range(100_000)))
    older.commit()
    older.close()
    before = (tmp_path / "search.sqlite3").stat().st_size
    index = SearchIndex(tmp_path, tmp_path / "state.sqlite3")
    assert index.search(db, "river", {}).total == 5
    index.close()
    tables = sqlite3.connect(tmp_path / "search.sqlite3").execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    )
    assert "record_facets" not in {name for (name,) in tables}
    assert (tmp_path / "search.sqlite3").stat().st_size < before / 4


def test_snippets_mark_the_query_words() -> None:
    text = "Daily readings. " * 20 + "Water quality of the river Rhine, sampled weekly."
    cut = make_snippet(text, ["water", "riv"])
    assert cut.startswith("… ") and "\x02Water\x03" in cut and "\x02river\x03" in cut
    assert make_snippet("short text", ["nothing"]) == "short text"
    assert make_snippet("", ["x"]) == "" and make_snippet("text", []) == ""


def test_words_for_rules_terms_and_cells() -> None:
    rule = "https://w3id.org/ld-aggregator/shapes/dcat-ap-3#Distribution-byteSize|sh:DatatypeConstraintComponent"
    assert rule_label(rule) == "Distribution-byteSize: datatype constraint"
    assert rule_label("mapperCrash") == "mapperCrash"
    assert term_label("http://publications.europa.eu/resource/authority/data-theme/ENVI") == (
        "Environment"
    )
    assert term_label("http://publications.europa.eu/resource/authority/licence/CC_BY_4_0") == (
        "CC BY 4.0"
    )
    assert term_label("http://publications.europa.eu/resource/authority/language/DEU") == "German"
    assert term_label("http://www.iana.org/assignments/media-types/text/csv") == "text/csv"
    # the INSPIRE themes of the ISO mapping's thesaurus table (a facet of GEMINI records)
    assert term_label("http://inspire.ec.europa.eu/theme/nz") == "Natural risk zones"
    assert term_label("https://example.org/unknown") is None
    assert property_label("http://purl.org/dc/terms/accrualPeriodicity") == "Update frequency"
    assert property_label("https://example.org/ns#someProperty") == "Some property"
    assert _defuse("=HYPERLINK(1)") == "'=HYPERLINK(1)" and _defuse("plain") == "plain"


def test_browsers_get_the_page_clients_their_format() -> None:
    chrome = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
    assert wants_html(chrome)
    assert wants_html("text/html")
    assert not wants_html(None) and not wants_html("*/*")
    assert not wants_html("application/sparql-results+json")
    assert not wants_html("application/sparql-results+json, text/html;q=0.5")


def test_quality_is_computed_again_at_most_every_refresh(tmp_path: Path) -> None:
    from aggregator.serve.dashboard.quality_view import QualityCache
    from aggregator.store.state import GENERATION

    db = _state(tmp_path / "state.sqlite3")
    slow, eager = QualityCache(refresh=3600), QualityCache(refresh=0)
    first, first_eager = slow.report(db), eager.report(db)
    assert first.catalogue.datasets == 0 and not slow.changed_since(db)
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, '7')", (GENERATION,))  # a harvest wrote
    assert slow.report(db) is first and slow.changed_since(db)  # kept: too recent
    again = eager.report(db)
    assert again is not first_eager and again.generation == 7 and not eager.changed_since(db)


def test_scheduler_facts_in_words() -> None:
    from datetime import UTC, datetime

    from aggregator.schedule.status import SourceSchedule
    from aggregator.serve.dashboard.schedule_view import breaker, next_run

    t = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
    base = SourceSchedule(
        source="s", frequency="daily", enabled=True, next_run=t, next_full=True, running=False,
        running_since=None, breaker="open", breaker_until=t, failures=3, failing_since=t,
        retry_at=None, last_status="failed", last_job=4, last_end=t, last_error="refused",
        requested=1,
    )  # fmt: skip
    assert next_run(base) == "2026-11-26 09:30 UTC (full re-harvest); harvest now requested"
    assert breaker(base) == (
        "open after 3 failed job(s) in a row (failing since 2026-11-26 09:30 UTC):"
        " skipped until 2026-11-26 09:30 UTC"
    )
    from dataclasses import replace

    assert breaker(replace(base, breaker="half-open")) == "half-open: a probe job runs"
    assert breaker(replace(base, breaker="closed", failures=0)) == "closed"
    assert next_run(replace(base, running=True, running_since=t)) == (
        "running since 2026-11-26 09:30 UTC"
    )
    assert next_run(replace(base, next_run=None, enabled=False)) == "not scheduled (paused)"


def test_a_search_answers_within_its_budget_and_the_page_says_what_is_not_searchable_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "BATCH", 5)  # records per catch-up transaction
    monkeypatch.setattr(search, "REQUEST_BUDGET", 0.0)  # one batch per search, then answer
    with admin_site(tmp_path) as site:
        db = _state(site.settings.store_path / "state.sqlite3")
        for n in range(1, 13):
            _put(db, n, "active", f"2026-01-01T00:00:{n:02d}.000000Z", f"River {n} water")
        first = requests.get(site.url + "datasets", timeout=60)
        assert 'id="hit-count">5 datasets' in first.text
        assert "7 changed records not searchable yet" in first.text
        second = requests.get(site.url + "datasets", params={"q": "river"}, timeout=60)
        assert 'id="hit-count">10 datasets' in second.text
        assert "2 changed records not searchable yet" in second.text
        third = requests.get(site.url + "datasets", params={"q": "river"}, timeout=60)
        assert 'id="hit-count">12 datasets' in third.text
        assert "index-catching-up" not in third.text


def test_the_keeper_indexes_changed_records_without_a_search(tmp_path: Path) -> None:
    db = _state(tmp_path / "state.sqlite3")
    for n in range(1, 1201):  # more than a catch-up batch
        _put(db, n, "active", f"2026-01-01T00:00:{n % 60:02d}.{n:06d}Z", f"River {n} water")
    keeper = SearchKeeper(tmp_path, interval=0.05)
    keeper.start()
    try:
        deadline = time.monotonic() + 60
        while keeper.indexed < 1200:
            assert time.monotonic() < deadline, f"indexed {keeper.indexed} of 1200"
            time.sleep(0.05)
        _put(db, 1201, "active", "2026-02-01T00:00:00.000000Z", "Lake")  # a later change
        while keeper.indexed < 1201:
            assert time.monotonic() < deadline, "the later change was not indexed"
            time.sleep(0.05)
    finally:
        keeper.stop()
    index = SearchIndex(tmp_path, tmp_path / "state.sqlite3")
    assert index.behind(db) == 0
    assert index.search(db, "river", {}).total == 1200 and index.search(db, "lake", {}).total == 1
    index.close()
