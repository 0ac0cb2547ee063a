"""The dashboard end to end in headless Chromium: Debian's ``chromium`` package driven by
Playwright with the system browser (no browser download). Pages render without a CSP
violation, a source is registered and previewed, harvest now runs a job, an error list
filters and exports, the map draws an extent, a hostile title stays text, and the main pages
keep their structure on a laptop and a phone (screenshots compared by size and landmarks,
not pixels).

Skipped, with the reason, only when no chromium is installed here; CI (.ci/run) installs it
and sets AGGREGATOR_REQUIRE_BROWSER=1, which turns a missing browser into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_site import HOSTILE_TITLE, PASSWORD, Site, served_site

from aggregator.config import load_settings

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BASELINE = Path(__file__).parent / "data" / "dashboard" / "layout.json"

if CHROMIUM is None:
    if os.environ.get("AGGREGATOR_REQUIRE_BROWSER"):
        raise RuntimeError("AGGREGATOR_REQUIRE_BROWSER is set but no chromium is installed")
    pytest.skip(
        "no chromium here: apt-get install -y chromium (CI installs it and runs these tests)",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright  # noqa: E402

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with served_site(tmp_path_factory.mktemp("browser")) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


class Watched:
    """A page with its console errors (CSP violations show there) and dialogs (alerts)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        page.on("dialog", self._dialog)

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)

    def _dialog(self, dialog: object) -> None:
        self.dialogs.append(getattr(dialog, "message", "?"))
        dialog.dismiss()  # type: ignore[attr-defined]


@pytest.fixture
def tab(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    try:
        yield Watched(context.new_page())
    finally:
        context.close()


def login(tab: Watched, site: Site, then: str) -> None:
    tab.page.goto(f"{site.url}login?next=/{then}")
    tab.page.fill("input[name=user]", "admin")
    tab.page.fill("input[name=password]", PASSWORD)
    tab.page.click("form.stack button[type=submit]")
    tab.page.wait_for_url(f"{site.url}{then}")


MAIN_PAGES = {
    "overview": "",
    "sources": "sources",
    "jobs": "jobs",
    "rejections": "rejections",
    "quality": "quality",
    "datasets": "datasets",
    "sparql": "sparql",
}


def test_pages_render_without_csp_violations(site: Site, tab: Watched) -> None:
    for name, path in MAIN_PAGES.items():
        tab.page.goto(site.url + path)
        assert tab.page.locator("h1").count() >= 1, name
        assert tab.page.locator("header.top nav a").count() == 7
    # the stylesheet applied (an external file, allowed by the CSP)
    color = tab.page.eval_on_selector("header.top", "e => getComputedStyle(e).backgroundColor")
    assert color == "rgb(246, 248, 250)"
    assert tab.errors == [] and tab.dialogs == []


def test_hostile_title_is_text_and_the_map_draws_the_extent(site: Site, tab: Watched) -> None:
    tab.page.goto(f"{site.url}datasets?q=injection")
    title = tab.page.locator("ol.hits a.title").first
    assert title.inner_text() == HOSTILE_TITLE
    title.click()
    tab.page.wait_for_selector("#map[data-drawn='1']", timeout=15_000)
    assert tab.page.locator("h1").first.inner_text() == HOSTILE_TITLE
    # the extent is a polygon in Leaflet's overlay pane, over the plain grid (no tiles)
    paths = tab.page.locator(".leaflet-overlay-pane path")
    assert paths.count() > 10  # grid lines plus the extent
    assert tab.page.locator(".leaflet-tile").count() == 0
    box = tab.page.locator("#map").bounding_box()
    assert box is not None and box["height"] > 200
    assert tab.dialogs == [] and tab.errors == []


def test_register_and_preview_a_source(site: Site, tab: Watched) -> None:
    login(tab, site, "admin/sources/new")
    p = tab.page
    p.fill("input[name=name]", "browser-dump")
    p.select_option("select[name=type]", "rdf-dump")
    p.fill("input[name=url]", site.sources["demo-dump"])
    p.click("button[value=preview]")
    p.wait_for_selector("#preview")
    assert re.search(r"\d+ would be stored", p.inner_text("#preview"))
    assert "browser-dump" not in load_settings(site.config).sources
    p.click("button[value=save]")
    p.wait_for_url(f"{site.url}sources/browser-dump")
    assert "browser-dump" in load_settings(site.config).sources
    assert tab.errors == []


def test_harvest_now_runs_a_job(site: Site, tab: Watched) -> None:
    login(tab, site, "sources/hostile")
    p = tab.page
    before = p.locator("table.jobs tbody tr").count()
    p.click("text=Harvest now")
    p.wait_for_selector(".notice")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        p.reload()
        rows = p.locator("table.jobs tbody tr")
        if rows.count() > before and "succeeded" in rows.first.inner_text():
            return
        time.sleep(0.5)
    raise AssertionError("harvest now made no finished job")


def test_error_list_filters_and_exports(site: Site, tab: Watched, tmp_path: Path) -> None:
    p = tab.page
    p.goto(f"{site.url}jobs?source=demo-dump")
    p.locator("table.jobs tbody tr td:first-child a").last.click()  # its first job rejected one
    p.wait_for_selector("#error-filter")
    everything = p.inner_text("#error-count")
    rule = p.locator("table.groups tbody tr td:nth-child(2) a").first.get_attribute("title")
    assert rule
    p.select_option("select[name=rule]", value=rule)
    p.fill("input[name=q]", "no-such-text-anywhere")
    p.click("#error-filter button[type=submit]")
    assert p.inner_text("#error-count").startswith("0 errors")
    p.fill("input[name=q]", "")
    p.click("#error-filter button[type=submit]")
    filtered = p.inner_text("#error-count")
    assert not filtered.startswith("0 ") and everything
    with p.expect_download() as info:
        p.click("#csv")
    target = tmp_path / "errors.csv"
    info.value.save_as(target)
    lines = target.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "job,record,stage,severity,rule,message,location"
    assert len(lines) > 1 and all(f",{rule}," in line for line in lines[1:])
    # the rejected record's payload one click away
    p.locator("table.errors a").first.click()
    p.wait_for_selector("pre.payload")
    assert "Findings" in p.inner_text("main")


def test_no_page_is_wider_than_a_phone(site: Site, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 360, "height": 740})
    page = context.new_page()
    try:
        page.goto(f"{site.url}jobs?source=demo-dump")
        job = page.locator("table.jobs tbody tr td:first-child a").last.get_attribute("href")
        page.goto(f"{site.url}datasets?q=river")
        dataset = page.locator("ol.hits a.title").first.get_attribute("href")
        assert job and dataset
        for url in (site.url.rstrip("/") + job, dataset, f"{site.url}sources/demo-dump"):
            page.goto(url)
            overflow = page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{url} is {overflow}px too wide for a phone"
    finally:
        context.close()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _layout(page: Page) -> dict[str, object]:
    """What the page is made of: its headings and landmarks, not its pixels."""
    return {
        "h1": page.locator("main h1").count(),
        "h2": [t.strip() for t in page.locator("main h2").all_inner_texts()],
        "nav": page.locator("header.top nav a").count(),
    }


@pytest.mark.parametrize(
    ("device", "viewport"),
    [("laptop", {"width": 1280, "height": 800}), ("phone", {"width": 390, "height": 844})],
)
def test_main_pages_keep_their_layout(
    site: Site, browser: Browser, device: str, viewport: dict[str, int], tmp_path: Path
) -> None:
    context = browser.new_context(viewport=viewport)  # type: ignore[arg-type]
    page = context.new_page()
    baseline = json.loads(BASELINE.read_text(encoding="utf-8"))
    found: dict[str, object] = {}
    try:
        for name, path in MAIN_PAGES.items():
            page.goto(site.url + path)
            shot = page.screenshot(full_page=True, path=str(tmp_path / f"{device}-{name}.png"))
            width, height = _png_size(shot)
            # readable: nothing wider than the screen (no sideways scrolling of the page)
            overflow = page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{name} on a {device} is {overflow}px too wide"
            assert width == viewport["width"]
            layout = _layout(page)
            found[name] = {**layout, "height": height}
            if os.environ.get("UPDATE_DASHBOARD_BASELINE"):
                continue
            expected = baseline[device][name]
            assert layout["h2"] == expected["h2"] and layout["nav"] == expected["nav"], name
            # heights move with data and fonts; a page twice or half as tall is a broken layout
            assert 0.5 * expected["height"] <= height <= 2 * expected["height"], (name, height)
    finally:
        context.close()
        if os.environ.get("UPDATE_DASHBOARD_BASELINE"):
            data = json.loads(BASELINE.read_text(encoding="utf-8")) if BASELINE.exists() else {}
            data[device] = found
            BASELINE.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


WORLD = Path(__file__).parent.parent / "aggregator/serve/dashboard/static/vendor/world"


def _dataset_with_extent(site: Site, page: Page) -> None:
    page.goto(f"{site.url}datasets?q=injection")
    page.locator("ol.hits a.title").first.click()
    page.wait_for_selector("#map[data-drawn='1']", timeout=15_000)


def test_the_map_draws_the_world_outline_under_the_extent(site: Site, tab: Watched) -> None:
    assert (WORLD / "world-110m.geojson").is_file(), "run make (tools/vendor_world.py)"
    p = tab.page
    _dataset_with_extent(site, p)
    p.wait_for_selector("#map[data-world-drawn='2']", timeout=15_000)  # land and borders
    land = p.locator(".leaflet-world-pane path.world-land")
    borders = p.locator(".leaflet-world-pane path.world-border")
    assert land.count() == 1 and borders.count() == 1
    # real coastlines, not an empty path: thousands of points across the view
    assert len(land.get_attribute("d") or "") > 2000
    assert len(borders.get_attribute("d") or "") > 500
    # under the extent: the outline's pane is below Leaflet's overlay pane
    z = p.evaluate(
        "[getComputedStyle(document.querySelector('.leaflet-world-pane')).zIndex,"
        " getComputedStyle(document.querySelector('.leaflet-overlay-pane')).zIndex]"
    )
    assert int(z[0]) < int(z[1])
    assert p.locator(".leaflet-tile").count() == 0  # nothing fetched from elsewhere
    assert tab.errors == []


def _png(width: int = 256, height: int = 256) -> bytes:
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xaa\xdd\xaa" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_a_configured_tile_server_draws_its_tiles(browser: Browser, tmp_path: Path) -> None:
    from aggregator.demo.peers.server import PeerServer

    tile = _png()
    asked: list[str] = []

    def tiles(environ: dict[str, object], start_response: object) -> list[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        asked.append(path)
        ok = re.fullmatch(r"/tiles/\d+/\d+/\d+\.png", path) is not None
        start_response(  # type: ignore[operator]
            "200 OK" if ok else "404 Not Found",
            [("Content-Type", "image/png" if ok else "text/plain")],
        )
        return [tile if ok else b"no"]

    with PeerServer(tiles) as server:  # type: ignore[arg-type]
        extra = (
            f'map_tiles = "{server.url}tiles/{{z}}/{{x}}/{{y}}.png"\n'
            'map_attribution = "Test tiles, loopback only"\n'
        )
        with served_site(tmp_path, scheduler=False, serve_extra=extra) as tiled:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            try:
                tab = Watched(context.new_page())
                _dataset_with_extent(tiled, tab.page)
                tab.page.wait_for_function(
                    "document.querySelectorAll('img.leaflet-tile-loaded').length > 0",
                    timeout=15_000,
                )
                assert "Test tiles, loopback only" in tab.page.inner_text(
                    ".leaflet-control-attribution"
                )
                assert tab.page.locator(".leaflet-world-pane path").count() == 0
                assert tab.errors == [], tab.errors  # the CSP admits the tile server's images
            finally:
                context.close()
    assert any(a.startswith("/tiles/") for a in asked)


def test_search_results_come_first_on_a_phone(site: Site, browser: Browser) -> None:
    for viewport, phone in (
        ({"width": 390, "height": 844}, True),
        ({"width": 1280, "height": 800}, False),
    ):
        context = browser.new_context(viewport=viewport)  # type: ignore[arg-type]
        try:
            page = context.new_page()
            page.goto(f"{site.url}datasets")
            first = page.locator("ol.hits li").first.bounding_box()
            facets = page.locator("aside.facets").bounding_box()
            assert first and facets
            if phone:  # the first result on the first screen, the facets after the results
                assert first["y"] + first["height"] <= viewport["height"], first
                assert facets["y"] > first["y"]
                assert page.locator("a.to-facets").is_visible()
            else:  # a column of facets left of the results
                assert facets["x"] + facets["width"] <= first["x"]
                assert not page.locator("a.to-facets").is_visible()
        finally:
            context.close()


#: (JS) the words of the page's table cells that the browser broke across two lines (a
#: break after a hyphen is a break between words); words longer than 24 characters (URLs,
#: ids, hashes) may break, and so may cells marked .url or .id
BROKEN_WORDS = r"""() => {
  const broken = [];
  for (const td of document.querySelectorAll("main td")) {
    if (td.closest(".url, .id")) continue;
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest(".url, .id")) continue;
      const re = /[^\s-]+/g;
      let m;
      while ((m = re.exec(node.data)) !== null) {
        if (m[0].length > 24) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


def test_table_cells_keep_their_words_whole(site: Site, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 360, "height": 740})
    page = context.new_page()
    try:
        page.goto(f"{site.url}jobs?source=demo-dump")
        job = page.locator("table.jobs tbody tr td:first-child a").last.get_attribute("href")
        page.goto(site.url.rstrip("/") + str(job))
        rejection = page.locator("table.errors a").first.get_attribute("href")
        for path in (str(job), str(rejection), "/jobs", "/quality", "/rejections", "/sources"):
            page.goto(site.url.rstrip("/") + path)
            assert page.evaluate(BROKEN_WORDS) == [], path
            overflow = page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{path} is {overflow}px too wide for a phone"
    finally:
        context.close()


def test_one_h1_on_every_page(site: Site, tab: Watched) -> None:
    p = tab.page
    p.goto(f"{site.url}datasets?q=rhine")  # titled in English and in Dutch
    p.locator("ol.hits a.title").first.click()
    p.wait_for_selector("main h1")
    assert p.locator("h1").count() == 1
    assert p.locator("ul.other-titles li[lang=nl]").count() == 1
