"""The dashboard's logins under abuse, against the real app under uvicorn on 127.0.0.1 (and a
second serving process of the same store where it matters): junk tokens and passwords do not
stall other pages and are limited per client address (429 before any hashing); the login
form has its own CSRF token; unauthenticated admin POSTs are 403 whatever they carry;
non-ASCII cookies and fields are refused cleanly; a wrong user name costs what a wrong
password costs; logging out closes the session everywhere; cookies are Secure when the
public URL is https, whatever the request's scheme."""

from __future__ import annotations

import hashlib
import http.client
import re
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from http.cookies import Morsel, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from dashboard_site import PASSWORD, TOKEN, Site, admin_site, free_port, serving

ADMIN_POSTS = (
    "admin/sources/new",
    "admin/sources/demo/edit",
    "admin/sources/demo/pause",
    "admin/sources/demo/harvest",
)


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A site whose limit of failures is out of reach: every attempt is hashed."""
    folder = tmp_path_factory.mktemp("roomy")
    with admin_site(folder, "admin_max_failures = 1000000") as site:
        yield site


def login_token(session: requests.Session, site: Site) -> str:
    """Open the login form as a browser does; its CSRF token (the nonce is in the cookie)."""
    page = session.get(site.url + "login", timeout=30)
    assert page.status_code == 200
    found = re.search(
        r'action="/login"[^>]*>\s*<input type="hidden" name="csrf" value="(\w+)"', page.text
    )
    return found.group(1) if found else ""  # (none before login CSRF: checked below)


def log_in(site: Site) -> requests.Session:
    s = requests.Session()
    data = {"csrf": login_token(s, site), "user": "admin", "password": PASSWORD}
    r = s.post(site.url + "login", data=data, timeout=30, allow_redirects=False)
    assert r.status_code == 303, r.status_code
    return s


def csrf_of(page: requests.Response | Answer) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found
    return found.group(1)


@dataclass
class Answer:
    status: int
    headers: Message
    text: str

    def cookie(self, name: str) -> Morsel[str]:
        return cookies_set(self.headers.get_all("set-cookie") or [])[name]


def cookies_set(headers: list[str]) -> dict[str, Morsel[str]]:
    """The cookies of a response's Set-Cookie headers, by name."""
    jar: dict[str, Morsel[str]] = {}
    for header in headers:
        jar.update(SimpleCookie(header))
    return jar


def raw(
    site: Site,
    method: str,
    path: str,
    headers: dict[str, str | bytes] | None = None,
    body: bytes = b"",
    *,
    source: str = "127.0.0.1",
    port: int | None = None,
) -> Answer:
    """One request from a chosen loopback address (127.0.0.0/8 is all ours), with raw
    header bytes when given."""
    conn = http.client.HTTPConnection(
        "127.0.0.1",
        port or int(site.url.rstrip("/").rsplit(":", 1)[1]),
        timeout=60,
        source_address=(source, 0),
    )
    try:
        conn.putrequest(method, "/" + path.lstrip("/"))
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
        return Answer(response.status, response.headers, text)
    finally:
        conn.close()


def form_post(site: Site, cookie: str | bytes, body: bytes, **kw: Any) -> Answer:
    headers = {"cookie": cookie, "content-type": "application/x-www-form-urlencoded"}
    return raw(site, "POST", "login", headers, body, **kw)


def fetch_times(url: str, n: int) -> list[float]:
    times = []
    with requests.Session() as s:
        for _ in range(n):
            start = time.perf_counter()
            r = s.get(url, timeout=120)
            times.append(time.perf_counter() - start)
            assert r.status_code == 200
    return times


def one_hash_seconds() -> float:
    """What one check of a stored hash costs on this machine now (same scrypt parameters)."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        hashlib.scrypt(b"junk", salt=b"0" * 16, n=2**14, r=8, p=1, dklen=32)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- 1. hashing off the event loop, failures limited per address -------------------------------
def test_junk_tokens_and_passwords_do_not_stall_other_pages(roomy: Site) -> None:
    static = roomy.url + "static/dashboard.css"
    quiet = statistics.median(fetch_times(static, 20))
    hash_cost = one_hash_seconds()
    stop = threading.Event()
    answers: list[int] = []

    def junk_tokens() -> None:
        with requests.Session() as s:
            while not stop.is_set():
                r = s.post(
                    roomy.url + "admin/sources/demo/pause",
                    headers={"authorization": "Bearer junk-junk-junk"},
                    timeout=120,
                )
                answers.append(r.status_code)

    def junk_passwords() -> None:
        with requests.Session() as s:
            token = login_token(s, roomy)
            while not stop.is_set():
                data = {"csrf": token, "user": "admin", "password": "junk"}
                answers.append(s.post(roomy.url + "login", data=data, timeout=120).status_code)

    threads = [threading.Thread(target=junk_tokens) for _ in range(3)]
    threads += [threading.Thread(target=junk_passwords) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while len(answers) < 12 and time.monotonic() < deadline:  # the junk is being hashed
            time.sleep(0.05)
        loaded = statistics.median(fetch_times(static, 20))
        hashed_meanwhile = len(answers)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert set(answers) <= {401, 403} and hashed_meanwhile >= 12, set(answers)
    # hashing on the event loop made a static file wait for several hashes (2.5 s in the
    # review); off the loop it waits for none
    assert loaded < 5 * quiet + 2 * hash_cost, (quiet, loaded, hash_cost)


def test_failed_checks_are_limited_per_address_before_hashing(tmp_path: Path) -> None:
    with admin_site(tmp_path, "admin_max_failures = 3\nadmin_failure_window = 120") as site:
        junk = {"authorization": "Bearer junk"}
        logged_in = log_in(site)  # a success: it counts for nothing
        for _ in range(3):
            assert raw(site, "POST", "admin/sources/demo/pause", junk).status == 403
        refused = raw(site, "POST", "admin/sources/demo/pause", junk)
        assert refused.status == 429
        assert 1 <= int(refused.headers["retry-after"]) <= 120
        # nothing is hashed for this address now: the right token and password wait too
        right = {"authorization": f"Bearer {TOKEN}"}
        assert raw(site, "POST", "admin/sources/demo/pause", right).status == 429
        s = requests.Session()
        data = {"csrf": login_token(s, site), "user": "admin", "password": PASSWORD}
        late = s.post(site.url + "login", data=data, timeout=30, allow_redirects=False)
        assert late.status_code == 429 and "retry-after" in late.headers
        # a session opened before goes on (it costs no hash), junk token or not
        page = logged_in.get(site.url + "admin/sources/new", timeout=30)
        assert page.status_code == 200
        acted = logged_in.post(
            site.url + "admin/sources/demo/pause",
            data={"csrf": csrf_of(page)},
            headers=junk,
            timeout=30,
        )
        # let in (to be told there is no such source)
        assert acted.status_code == 400 and "no source named" in acted.text
        # another address is not concerned: junk is counted apart, and the right password works
        elsewhere = "127.0.0.2"
        assert raw(site, "POST", "admin/sources/demo/pause", junk, source=elsewhere).status == 403
        form = raw(site, "GET", "login", source=elsewhere)
        nonce = form.cookie("agg_login").value
        body = urlencode({"csrf": csrf_of(form), "user": "admin", "password": PASSWORD})
        answer = form_post(site, f"agg_login={nonce}", body.encode(), source=elsewhere)
        assert answer.status == 303 and "agg_session" in answer.headers["set-cookie"]
        # a second serving process of the same store counts the same failures
        port = free_port()
        with serving(site.settings, port, scheduler=False):
            assert raw(site, "POST", "admin/sources/demo/pause", junk, port=port).status == 429


def test_behind_a_trusted_proxy_the_forwarded_client_is_counted(tmp_path: Path) -> None:
    settings = 'admin_max_failures = 2\ntrusted_proxies = "127.0.0.1, ::1"'
    with admin_site(tmp_path, settings) as site:

        def junk(forwarded: str, source: str = "127.0.0.1") -> int:
            headers = {"authorization": "Bearer junk", "x-forwarded-for": forwarded}
            return raw(site, "POST", "admin/sources/demo/pause", headers, source=source).status

        # the proxy speaks for many clients: one of them is limited, not the others
        assert [junk("203.0.113.5") for _ in range(3)] == [403, 403, 429]
        assert junk("198.51.100.1, 203.0.113.5") == 429  # what the client itself wrote is moot
        assert junk("203.0.113.6") == 403
        # from anyone else, the header counts for nothing
        untrusted = "127.0.0.3"
        assert [junk(f"192.0.2.{i}", untrusted) for i in range(3)] == [403, 403, 429]


# -- 2. login CSRF, and 403 before anything else ---------------------------------------------
def test_the_login_form_carries_its_own_csrf_token(roomy: Site) -> None:
    url = roomy.url + "login"
    right = {"user": "admin", "password": PASSWORD}
    bare = requests.post(url, data=right, timeout=30, allow_redirects=False)
    assert bare.status_code == 403 and "agg_session" not in bare.headers.get("set-cookie", "")
    attacker = requests.Session()
    their_token = login_token(attacker, roomy)
    assert len(their_token) == 64 and attacker.cookies["agg_login"]
    victim = requests.Session()
    login_token(victim, roomy)  # the victim's browser has a login form of its own
    for forged in (their_token, "0" * 64, ""):
        r = victim.post(url, data={**right, "csrf": forged}, timeout=30, allow_redirects=False)
        assert r.status_code == 403 and "agg_session" not in r.headers.get("set-cookie", "")
        assert "expired" in r.text
    no_cookie = requests.post(url, data={**right, "csrf": their_token}, timeout=30)
    assert no_cookie.status_code == 403
    mine = login_token(victim, roomy)
    r = victim.post(url, data={**right, "csrf": mine}, timeout=30, allow_redirects=False)
    assert r.status_code == 303 and "agg_session=" in r.headers["set-cookie"]


def test_unauthenticated_admin_posts_are_403_whatever_they_carry(roomy: Site) -> None:
    bodies: list[tuple[dict[str, str | bytes], bytes]] = [
        ({}, b""),
        ({"content-type": "application/x-www-form-urlencoded"}, b"csrf=junk&name=x"),
        ({"content-type": "multipart/form-data; boundary=zz"}, b"junk, not multipart"),
        ({"content-type": "multipart/form-data"}, b"--"),
        ({"content-type": "application/json"}, b'{"csrf": 1}'),
    ]
    for path in ADMIN_POSTS:
        for headers, body in bodies:
            assert raw(roomy, "POST", path, headers, body).status == 403, (path, headers)
    s = log_in(roomy)  # logged in, the CSRF check follows: still 403 without the token
    assert s.post(roomy.url + "admin/sources/demo/pause", data={}, timeout=30).status_code == 403


def test_without_an_administrator_admin_urls_are_403_by_get_and_post(tmp_path: Path) -> None:
    with admin_site(tmp_path, admin=False) as site:
        assert raw(site, "GET", "admin/sources/new").status == 403
        for path in ADMIN_POSTS:
            assert raw(site, "POST", path).status == 403, path
        junk = {"content-type": "multipart/form-data; boundary=zz"}
        assert raw(site, "POST", "admin/sources/new", junk, b"junk").status == 403


# -- 3. hostile bytes, timing, logout, Secure -------------------------------------------------
def test_non_ascii_cookies_and_fields_are_refused_cleanly(roomy: Site) -> None:
    signature = "0" * 64
    for cookie in (
        "agg_session=é".encode(),
        "agg_session=0123|99999999999|é".encode(),
        f"agg_session=é|99999999999|{signature}".encode(),
        "agg_login=é".encode(),
        b"agg_session=\xff\xfe; agg_login=\xff",
    ):
        assert raw(roomy, "GET", "", {"cookie": cookie}).status == 200  # a visitor, nothing more
        assert raw(roomy, "GET", "login", {"cookie": cookie}).status == 200
        assert raw(roomy, "GET", "admin/sources/new", {"cookie": cookie}).status == 303
        assert raw(roomy, "POST", "admin/sources/demo/pause", {"cookie": cookie}).status == 403
        body = "csrf=é&user=admin&password=x".encode()
        assert form_post(roomy, cookie, body).status == 403
    bearer = {"authorization": "Bearer é".encode()}
    assert raw(roomy, "POST", "admin/sources/demo/pause", bearer).status == 403
    s = log_in(roomy)
    jar = "; ".join(f"{k}={v}" for k, v in s.cookies.items())
    fields = [urlencode({"csrf": "é" * 64}), urlencode({"csrf": "０" * 64}), "csrf=%ff%fe%ed%b3%bf"]
    for field in fields:
        for path in ("admin/sources/demo/pause", "logout"):
            headers = {"cookie": jar, "content-type": "application/x-www-form-urlencoded"}
            answer = raw(roomy, "POST", path, headers, field.encode())
            assert answer.status == 403 and "CSRF" in answer.text, (path, field)
    for user in ("adm\u00efn", "é" * 300):
        anon = requests.Session()
        data = {"csrf": login_token(anon, roomy), "user": user, "password": "x"}
        assert anon.post(roomy.url + "login", data=data, timeout=30).status_code == 401
    anon = requests.Session()
    token = login_token(anon, roomy)
    undecodable = f"csrf={token}&user=%ff%fe&password=%ed%b3%bf".encode()
    assert form_post(roomy, f"agg_login={anon.cookies['agg_login']}", undecodable).status == 401


def test_a_wrong_user_name_takes_as_long_as_a_wrong_password(roomy: Site) -> None:
    s = requests.Session()
    token = login_token(s, roomy)
    times: dict[str, list[float]] = {"nobody": [], "admin": []}
    for round_ in range(15):
        order = ("nobody", "admin") if round_ % 2 else ("admin", "nobody")
        for user in order:
            data = {"csrf": token, "user": user, "password": "wrong password"}
            start = time.perf_counter()
            r = s.post(roomy.url + "login", data=data, timeout=60)
            times[user].append(time.perf_counter() - start)
            assert r.status_code == 401 and "Wrong user name or password" in r.text
    unknown_user = statistics.median(times["nobody"])
    wrong_password = statistics.median(times["admin"])
    # before: two hashes for an unknown user against one for a wrong password (76 / 31 ms)
    assert 1 / 1.5 < unknown_user / wrong_password < 1.5, (unknown_user, wrong_password)


def test_logging_out_closes_the_session_in_every_serving_process(roomy: Site) -> None:
    s = log_in(roomy)
    copied = {"agg_session": s.cookies["agg_session"]}
    form = s.get(roomy.url + "admin/sources/new", timeout=30)
    assert form.status_code == 200
    csrf = csrf_of(form)
    port = free_port()
    other = f"http://127.0.0.1:{port}/"
    with serving(roomy.settings, port, scheduler=False):  # a second serving process
        for url in (roomy.url, other):
            r = requests.get(url + "admin/sources/new", cookies=copied, timeout=30)
            assert r.status_code == 200 and "Log out" in r.text
        out = s.post(roomy.url + "logout", data={"csrf": csrf}, timeout=30, allow_redirects=False)
        assert out.status_code == 303
        for url in (roomy.url, other):
            r = requests.get(
                url + "admin/sources/new", cookies=copied, timeout=30, allow_redirects=False
            )
            assert r.status_code == 303 and "/login" in r.headers["location"], url
            r = requests.post(
                url + "admin/sources/demo/pause", cookies=copied, data={"csrf": csrf}, timeout=30
            )
            assert r.status_code == 403, url
    assert log_in(roomy).get(roomy.url + "admin/sources/new", timeout=30).status_code == 200


def test_cookies_are_secure_when_the_public_url_is_https(tmp_path: Path, roomy: Site) -> None:
    # behind a reverse proxy that terminates TLS, requests reach us over plain HTTP
    public = 'public_base_url = "https://dashboard.example.org/"'
    with admin_site(tmp_path, public) as site:
        form = raw(site, "GET", "login")
        nonce = form.cookie("agg_login")
        assert nonce["secure"] and nonce["httponly"]
        body = urlencode({"csrf": csrf_of(form), "user": "admin", "password": PASSWORD})
        answer = form_post(site, f"agg_login={nonce.value}", body.encode())
        assert answer.status == 303
        session = answer.cookie("agg_session")
        assert session["secure"] and session["httponly"] and session["samesite"] == "strict"
    # and not when clients reach us by plain HTTP, even if a request claims https
    form = raw(roomy, "GET", "login", {"x-forwarded-proto": "https"})
    assert not form.cookie("agg_login")["secure"]
    body = urlencode({"csrf": csrf_of(form), "user": "admin", "password": PASSWORD})
    headers = {
        "cookie": f"agg_login={form.cookie('agg_login').value}",
        "content-type": "application/x-www-form-urlencoded",
        "x-forwarded-proto": "https",
    }
    answer = raw(roomy, "POST", "login", headers, body.encode())
    assert answer.status == 303 and not answer.cookie("agg_session")["secure"]
