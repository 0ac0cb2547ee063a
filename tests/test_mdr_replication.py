"""Replication from the strict local MDR service: full cycles through run_source into a real
store, with the notifier and a local SMTP server, on one injected clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from mdr_env import PASSWORD, T0, USER, Clock, MdrBench

from aggregator.config import Secret
from aggregator.demo.peers.mdr_pages import MdrPage, generate_page, iso, load_sample_pages
from aggregator.demo.peers.smtp import SmtpPeer
from aggregator.harvest.mdr import MdrHarvester
from aggregator.harvest.mdr.client import MdrClient, MdrFault

INVALID = "https://portal.example.gov.in/transport/driving-licence.html"  # language "xyz"
HOSPITALS = "https://portal.example.gov.in/health/hospitals.html"
ACT = "https://portal.example.gov.in/acts/right-to-services-act.html"


@pytest.fixture
def smtp() -> Iterator[SmtpPeer]:
    with SmtpPeer() as peer:
        yield peer


def bench_for(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pages: list[MdrPage] | None = None,
    **kw: object,
) -> MdrBench:
    bench = MdrBench(tmp_path, load_sample_pages() if pages is None else pages, **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(MdrHarvester, "clock", bench.clock)
    return bench


def test_first_run_then_new_updated_and_exited_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smtp: SmtpPeer
) -> None:
    bench = bench_for(tmp_path, monkeypatch, smtp=smtp)
    try:
        job = bench.run()
        assert job.status == "succeeded", job.message
        assert (job.counters["added"], job.counters["rejected"]) == (5, 1)
        # up to now less the margin at the end (end_margin_seconds, 300 by default)
        assert bench.store.checkpoint("portal") == "2026-01-11T23:55:00Z"
        assert job.listing["checkpoint_saved"] == "2026-01-11T23:55:00Z"
        # 11 one-day windows, each asked for its size; the small ones fetched at once
        ops = bench.operations()
        assert ops[0] == "getStatus"
        assert ops.count("getMetadataSize") == 11
        assert ops.count("getAllMetadata") == 6  # the days with pages
        assert "getNewMetadata" not in ops
        # the invalid page: rejected with its attribute, the website admin notified
        assert bench.status(INVALID) == "rejected"
        [note] = bench.service.notifications
        assert (note.event_id, note.error_no, note.source) == (
            "RECV_INVALID_MD",
            "Language",
            INVALID,
        )
        assert "'xyz' is not one of" in note.description and note.user == USER
        assert bench.kinds().count("RECV_INVALID_MD") == 1
        assert "MD_REPL_SUCCESS" in bench.kinds()
        [mail] = smtp.wait_for(1)
        assert mail["Subject"] == "[ld-aggregator] RECV_INVALID_MD: portal"
        assert "attribute: Language" in mail.get_content()

        # a day later: one page published, one modified, one exited
        bench.clock.advance(24 * 60)
        new = generate_page(1, T0 + timedelta(hours=3))
        bench.service.publish(new)
        bench.service.modify(HOSPITALS, T0 + timedelta(hours=5), title="Government Hospitals 2026")
        bench.service.exit(ACT, T0 + timedelta(hours=7))
        bench.service.calls.clear()
        bench.heard.clear()
        job = bench.run()
        assert job.status == "succeeded", job.message
        assert job.listing["checkpoint_used"] == "2026-01-11T23:55:00Z"
        c = job.counters
        assert (c["added"], c["updated"], c["withdrawn"]) == (1, 1, 1)
        windows = {(start, end) for op, start, end in bench.service.calls if start}
        assert windows == {("2026-01-11T23:55:00Z", "2026-01-12T23:55:00Z")}  # only the new one
        assert bench.status(new.identifier) == "active"
        assert bench.status(ACT) == "withdrawn"
        row = bench.store.record("portal", HOSPITALS)
        assert row is not None
        assert b'"Government Hospitals 2026"@en' in bench.store.dataset_ntriples(row)
        assert bench.kinds()[-2:] == ["MD_REPL_SUCCESS", "MDR_STATUS_OK"]
    finally:
        bench.close()


def test_per_event_calls_when_all_at_once_would_exceed_the_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10 bytes/s and a 1-minute round trip: no window of several kB fits at once
    bench = bench_for(tmp_path, monkeypatch, options={"max_round_trip_minutes": 1, "rate": 10})
    try:
        bench.service.exit(ACT, T0 - timedelta(days=3, hours=12))  # Jan 8, a day with a page
        job = bench.run()
        assert job.status == "succeeded", job.message
        ops = bench.operations()
        assert "getAllMetadata" not in ops
        assert ops.count("getNewMetadata") == 6
        assert ops.count("getUpdatedMetadata") == 0  # the sizes said there were none
        assert ops.count("getExitedWebPages") == 1
        # published and exited before it was ever replicated: never stored as active
        assert bench.status(ACT) is None
        assert job.counters["added"] == 4
    finally:
        bench.close()


def test_a_page_the_service_flags_is_rejected_as_md_validation_err(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = load_sample_pages()
    pages[1].service_errors = ("PublisherPhone",)
    bench = bench_for(tmp_path, monkeypatch, pages=pages)
    try:
        job = bench.run()
        assert job.counters["rejected"] == 2
        kinds = bench.kinds()
        assert kinds.count("MD_VALIDATION_ERR") == 1 and kinds.count("RECV_INVALID_MD") == 1
        # only the page we found invalid is notified: the service knows its own flags
        assert [n.source for n in bench.service.notifications] == [INVALID]
    finally:
        bench.close()


def test_a_wrong_password_fails_the_job_without_showing_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "Wr0ng-" + PASSWORD
    bench = bench_for(tmp_path, monkeypatch, password=wrong)
    try:
        with caplog.at_level(logging.DEBUG):
            job = bench.run()
        assert job.status == "failed"
        assert "wsse:FailedAuthentication" in job.message
        assert "digest does not match the password of 'apmdrsrv'" in job.message
        assert bench.service.refused == ["the digest does not match the password of 'apmdrsrv'"]
        assert bench.kinds()[-3:] == ["JobFailed", "MD_REPL_FAILED", "JobFinished"]
        assert bench.store.checkpoint("portal") is None
        shown = [job.message, repr(job.listing), repr(job.counters), caplog.text]
        shown += [repr(e) for e in bench.heard]
        shown.append(repr(bench.source))
        for text in shown:
            assert wrong not in text and PASSWORD not in text
        state = (bench.settings.store_path / "state.sqlite3").read_bytes()
        assert wrong.encode() not in state and PASSWORD.encode() not in state
    finally:
        bench.close()


def test_a_soap_fault_is_final_but_an_unavailable_service_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault comes with HTTP 500: sending the same envelope again would be a replay (the
    service refuses a nonce it has seen), so only 429/502/503/504 are retried for MDR."""
    bench = bench_for(tmp_path, monkeypatch, password="Wr0ng-" + PASSWORD, retries=3)
    try:
        job = bench.run()
        assert job.status == "failed"
        assert "digest does not match" in job.message
        # one request, one refusal: no resent envelope, no "nonce was used before"
        assert bench.service.refused == ["the digest does not match the password of 'apmdrsrv'"]
        assert bench.sleeps == []
    finally:
        bench.close()
    bench = bench_for(tmp_path / "down", monkeypatch, retries=2)
    try:
        bench.service.service_up = False
        job = bench.run()
        assert job.status == "failed"
        assert len(bench.sleeps) == 2  # 503: retried twice, then the job fails
    finally:
        bench.close()


def test_replayed_stale_and_future_requests_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = bench_for(tmp_path, monkeypatch)
    secret = Secret("MDR_PASSWORD", PASSWORD)
    try:
        with MdrHarvester.open_session(bench.http(), bench.source) as http:
            replaying = MdrClient(bench.url, http, USER, secret, clock=bench.clock, nonce="n-1")
            assert replaying.status().healthy
            with pytest.raises(MdrFault, match="the nonce was used before"):
                replaying.status()
            for offset, ok in ((-301, False), (-299, True), (59, True), (61, False)):
                at = Clock(bench.clock.now + timedelta(seconds=offset))
                client = MdrClient(bench.url, http, USER, secret, clock=at)
                if ok:
                    assert client.status().healthy
                else:
                    with pytest.raises(MdrFault, match=r"older than 300 s|60 s in the future"):
                        client.status()
            fresh = MdrClient(bench.url, http, USER, secret, clock=bench.clock)
            fresh.status()
            fresh.status()  # a fresh nonce per request: never a replay
        assert bench.service.refused == [
            "the nonce was used before (a replayed request)",
            f"Created {iso(bench.clock.now - timedelta(seconds=301))} is older than 300 s",
            f"Created {iso(bench.clock.now + timedelta(seconds=61))} is more than 60 s in the"
            " future",
        ]
    finally:
        bench.close()


def test_a_service_down_mid_window_loses_nothing_and_escalates_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smtp: SmtpPeer
) -> None:
    from aggregator.harvest.mdr.monitor import check_status

    pages = [generate_page(i, T0 - timedelta(days=10 - i)) for i in range(10)]
    bench = bench_for(tmp_path, monkeypatch, pages=pages, smtp=smtp)
    try:
        bench.service.down_after_calls = 8  # 4 windows (size + all each), then 503
        failed = bench.run()
        assert failed.status == "failed"
        assert "HTTP 503" in failed.message
        saved = bench.store.checkpoint("portal")
        assert saved == "2026-01-05T00:00:00Z"  # the 4 stored windows count
        assert failed.listing["checkpoint_progress"] == saved
        assert failed.counters["added"] == 3  # pages 0..2, published Jan 2..4
        assert bench.kinds() == [
            "JobStarted",
            "SourceUnreachable",
            "MDR_SERVICE_DOWN",
            "JobFailed",
            "MD_REPL_FAILED",
            "JobFinished",
        ]
        # the monitor checks every 10 minutes while the service is down
        for _ in range(3):
            bench.clock.advance(10)
            check_status(bench.settings, bench.bus, clock=bench.clock, http=bench.http())
            bench.notifier.tick()
        assert "DOWN_TIME_ESCLTN" in bench.kinds()  # 30 minutes down
        bench.clock.advance(20)
        assert bench.run().status == "failed"  # still down: 50 minutes
        bench.clock.advance(15)
        bench.notifier.tick()  # 65 minutes failing: MD_REPL_FAILURE_ESCLTN
        bench.service.service_up = True
        bench.service.down_after_calls = None
        bench.clock.advance(5)
        check_status(bench.settings, bench.bus, clock=bench.clock, http=bench.http())
        resumed = bench.run()
        assert resumed.status == "succeeded", resumed.message
        assert resumed.listing["checkpoint_used"] == saved
        assert resumed.counters["added"] == 7
        assert all(bench.status(p.identifier) == "active" for p in pages)  # nothing skipped
        assert bench.kinds()[6:] == [
            *["MDR_SERVICE_DOWN"] * 3,  # the monitor, 10, 20 and 30 minutes after
            "DOWN_TIME_ESCLTN",  # down for 30 minutes (EscalationDurationStatus)
            "JobStarted",
            "SourceUnreachable",
            "MDR_SERVICE_DOWN",
            "JobFailed",
            "MD_REPL_FAILED",
            "JobFinished",
            "MD_REPL_FAILURE_ESCLTN",  # failing for 65 minutes (EscalationDurationMD: 60)
            "MDR_STATUS_OK",  # the monitor finds it up
            "MDR_SRV_RECOVERED",
            "JobStarted",
            "JobRecovered",
            "JobFinished",
            "MD_REPL_SUCCESS",
            "MDR_STATUS_OK",
            "MD_REPL_RECOVERED",
        ]
        first_windows = [s for op, s, e in bench.service.calls if op == "getMetadataSize"]
        assert first_windows.count(saved) == 2  # the failed window, asked again from there
    finally:
        bench.close()
    subjects = [m["Subject"].removeprefix("[ld-aggregator] ") for m in smtp.messages]
    assert subjects == [
        "MDR_SERVICE_DOWN: portal",
        "MD_REPL_FAILED: portal",
        "DOWN_TIME_ESCLTN: portal",
        "MD_REPL_FAILURE_ESCLTN: portal",
        "MDR_SRV_RECOVERED: portal",
        "MD_REPL_RECOVERED: portal",
    ]
    rcpt = [sorted(to) for _, to in smtp.envelopes]
    assert rcpt[0] == ["mdc-admin@aggregator.example", "webmaster@portal.example.gov.in"]
    assert rcpt[2] == ["cio@portal.example.gov.in", "mdc-head@aggregator.example"]
    log = (tmp_path / "events.log").read_text().splitlines()
    assert [line.split()[2] for line in log] == [s.split(":")[0] for s in subjects]


def test_get_webpage_metadata_returns_current_pages_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = bench_for(tmp_path, monkeypatch)
    secret = Secret("MDR_PASSWORD", PASSWORD)
    try:
        bench.service.modify(HOSPITALS, T0 - timedelta(hours=1), title="Hospitals (revised)")
        bench.service.exit(ACT, T0 - timedelta(hours=1))
        with MdrHarvester.open_session(bench.http(), bench.source) as http:
            client = MdrClient(bench.url, http, USER, secret, clock=bench.clock)
            pages = client.pages([HOSPITALS, ACT, "https://portal.example.gov.in/none.html"])
        tns = "{http://mdc.npi.gov.in}"
        assert [p.findtext(f"{tns}identifier") for p in pages] == [HOSPITALS]
        assert pages[0].findtext(f"{tns}metadata/{tns}title") == "Hospitals (revised)"
        assert pages[0].findtext(f"{tns}metadata/{tns}dateModified") == "2026-01-11T23:00:00Z"
    finally:
        bench.close()
