"""The scheduler with an injected clock: frequencies, the window, blackouts, parallel limits,
one job per source, retries with backoff, the circuit breaker, restart recovery, full
re-harvests. The jobs are plain functions here; tests/test_schedule_store.py runs real ones."""

from __future__ import annotations

import random
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aggregator.config import ScheduleSettings, Settings, SourceConfig
from aggregator.config.timing import Timing, parse_frequency, parse_period
from aggregator.core.errors import ConfigError, StoreBusyError
from aggregator.schedule.book import Book
from aggregator.schedule.scheduler import JobResult, Scheduler
from aggregator.schedule.status import describe, request_harvest, schedule_status

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)  # a Monday morning, outside the night window


class Clock:
    def __init__(self, t: datetime = T0) -> None:
        self.t = t

    def now(self) -> datetime:
        return self.t

    def at(self, day: int, hour: int, minute: int = 0) -> None:
        """Move to ``hour:minute`` of day ``day`` (0 = the Monday of T0); never backwards."""
        t = T0.replace(hour=hour, minute=minute) + timedelta(days=day)
        assert t >= self.t
        self.t = t


class Jobs:
    """A job function: each call is recorded and returns the next scripted result (default
    success); ``hold`` makes calls wait until released (parallelism tests)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, datetime]] = []
        self.options: list[tuple[str, bool, bool]] = []  # source, force, allow_mass_withdrawal
        self.results: dict[str, list[JobResult | Exception]] = {}
        self.hold: threading.Event | None = None
        self.clock: Clock | None = None
        self.lock = threading.Lock()
        self.peak = 0
        self.active = 0

    def __call__(
        self,
        settings: Settings,
        source: str,
        full: bool,
        cancel: threading.Event,
        *,
        force: bool = False,
        allow_mass_withdrawal: bool = False,
    ) -> JobResult:
        with self.lock:
            self.calls.append((source, full, self.clock.now() if self.clock else T0))
            self.options.append((source, force, allow_mass_withdrawal))
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            if self.hold is not None:
                while not self.hold.wait(0.01):
                    if cancel.is_set():
                        return JobResult("cancelled", 1, "cancelled")
            scripted = self.results.get(source)
            result = scripted.pop(0) if scripted else JobResult("succeeded", 1, "", True)
            if isinstance(result, Exception):
                raise result
            return replace(result, full_listing=result.full_listing or full)
        finally:
            with self.lock:
                self.active -= 1

    def sources(self) -> list[str]:
        return [c[0] for c in self.calls]


def settings(tmp_path: Path, *sources: SourceConfig, **schedule: object) -> Settings:
    return Settings(
        config_path=None,
        store_path=tmp_path / "store",
        base_iri="http://localhost:8000/",
        sources={s.name: s for s in sources},
        schedule=replace(ScheduleSettings(), **schedule),  # type: ignore[arg-type]
    )


def source(name: str, **kw: object) -> SourceConfig:
    return SourceConfig(name=name, type="oai-pmh", url=f"http://127.0.0.1:9/{name}", **kw)  # type: ignore[arg-type]


def make(tmp_path: Path, s: Settings, clock: Clock, jobs: Jobs) -> Scheduler:
    jobs.clock = clock
    return Scheduler(s, Book(s.store_path), jobs, clock=clock, rng=random.Random(7))


def step(sched: Scheduler) -> list[str]:
    """One tick, then let the started jobs end and account for them."""
    started = sched.tick()
    sched.wait(10)
    return started


# -- timing ---------------------------------------------------------------------------------
def test_periods_wrap_midnight_and_keep_to_weekdays() -> None:
    night = parse_period("22:00-06:00")
    sat = parse_period("Sat 00:00-06:00")
    weekdays = parse_period("Mon-Fri 08:00-18:00")
    holidays = parse_period("2026-12-24/2026-12-26")
    timing = Timing(night, (sat,))  # type: ignore[arg-type]
    mon = T0  # Monday 08:00
    assert timing.next_allowed(mon) == mon.replace(hour=22)
    assert timing.allowed(mon.replace(hour=23)) and timing.allowed(mon + timedelta(hours=21))
    fri_night = mon + timedelta(days=4, hours=15)  # Friday 23:00
    assert timing.allowed(fri_night)
    # Saturday 00:00-06:00 is blacked out; the window then closes at 06:00: Saturday 22:00
    assert timing.next_allowed(fri_night + timedelta(hours=1)) == mon + timedelta(days=5, hours=14)
    assert weekdays.end_if_inside(mon, UTC) == mon.replace(hour=18)
    assert weekdays.end_if_inside(mon + timedelta(days=5), UTC) is None  # Saturday
    assert holidays.end_if_inside(datetime(2026, 12, 26, 23, tzinfo=UTC), UTC) == datetime(
        2026, 12, 27, tzinfo=UTC
    )
    assert Timing(None, ()).allowed(mon)  # no window: any time
    for bad in ("22:00", "Sat 25:00-06:00", "Xyz 01:00-02:00", "2026-12-27/2026-12-24"):
        with pytest.raises(ConfigError):
            parse_period(bad)


def test_frequencies() -> None:
    t = datetime(2026, 1, 31, 23, 10, tzinfo=UTC)
    assert parse_frequency("daily").next_after(t) == t + timedelta(days=1)
    assert parse_frequency("hourly").next_after(t) == t + timedelta(hours=1)
    assert parse_frequency("weekly").next_after(t) == t + timedelta(days=7)
    assert parse_frequency("monthly").next_after(t) == datetime(2026, 2, 28, 23, 10, tzinfo=UTC)
    assert parse_frequency("30 2 * * *").next_after(t) == datetime(2026, 2, 1, 2, 30, tzinfo=UTC)
    assert parse_frequency("manual").next_after(t) is None
    # missed due times are not caught up one by one
    assert parse_frequency("daily").next_due(t, t + timedelta(days=3, hours=1)) == t + timedelta(
        days=4
    )
    for bad in ("fortnightly", "61 * * * *", "* * *"):
        with pytest.raises(ConfigError):
            parse_frequency(bad)


# -- frequencies, window, blackouts ---------------------------------------------------------
def test_daily_source_runs_once_a_night_inside_the_window(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    sched = make(tmp_path, settings(tmp_path, source("a")), clock, jobs)
    assert step(sched) == []  # 08:00: outside 22:00-06:00
    [status] = schedule_status(sched.settings, clock.now())
    assert status.next_run == T0.replace(hour=22)
    clock.at(0, 22, 5)
    assert step(sched) == ["a"]
    clock.at(0, 23)
    assert step(sched) == []  # done for today
    clock.at(1, 5)
    assert step(sched) == []
    clock.at(1, 22, 5)
    assert step(sched) == ["a"]  # 24 h after the previous due time
    assert [c[2] for c in jobs.calls] == [
        T0.replace(hour=22, minute=5),
        T0 + timedelta(days=1, hours=14, minutes=5),
    ]


def test_hourly_keeps_to_the_window_and_cron_names_its_own_times(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(
        tmp_path, source("hourly", schedule="hourly"), source("cron", schedule="30 14 * * *")
    )
    sched = make(tmp_path, s, clock, jobs)
    starts: list[tuple[str, int]] = []
    for hour in range(8, 24 + 8):
        clock.at(hour // 24, hour % 24, 31)
        starts += [(name, hour % 24) for name in step(sched)]
    assert [h for n, h in starts if n == "hourly"] == [22, 23, 0, 1, 2, 3, 4, 5]
    assert [h for n, h in starts if n == "cron"] == [8, 14]  # new: at once; then at 14:30


def test_blackout_periods_are_skipped(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("a", schedule="hourly", blackout=("Mon 09:00-12:00",)), window="")
    sched = make(tmp_path, s, clock, jobs)
    hours = []
    for hour in range(8, 14):
        clock.at(0, hour, 1)
        hours += [hour for _ in step(sched)]
    assert hours == [8, 12, 13]
    [status] = schedule_status(s, T0.replace(hour=9))
    assert status.next_run is not None


def test_manual_source_runs_only_on_request_and_requests_ignore_the_window(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("m", schedule="manual"), source("p", enabled=False))
    sched = make(tmp_path, s, clock, jobs)
    clock.at(0, 23)
    assert step(sched) == []  # manual, and paused
    request_harvest(s, "m", full=True)
    request_harvest(s, "m")  # two clicks make one job
    request_harvest(s, "p")
    clock.at(1, 12)  # midday: outside the window
    assert sorted(step(sched)) == ["m", "p"]
    assert ("m", True) in [(c[0], c[1]) for c in jobs.calls]
    assert step(sched) == []
    with pytest.raises(ConfigError):
        request_harvest(s, "nope")


def test_a_handed_over_request_carries_its_options_and_names_its_run(tmp_path: Path) -> None:
    """What ``aggregator harvest`` hands over: --full, --force and --allow-mass-withdrawal
    reach the job, and the request says which run took it (so it can be followed)."""
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("m", schedule="manual"), source("n", schedule="manual"))
    sched = make(tmp_path, s, clock, jobs)
    book = sched.book
    forced = book.request("m", True, "cli:harvest", T0, force=True, allow_mass_withdrawal=True)
    plain = book.request("n", False, "cli:harvest", T0)
    assert book.request_taken(forced) == (False, None)
    assert sorted(step(sched)) == ["m", "n"]
    assert sorted(jobs.options) == [("m", True, True), ("n", False, False)]
    assert ("m", True) in [(c[0], c[1]) for c in jobs.calls]
    runs = {r.source: r for r in book.runs()}
    assert book.request_taken(forced) == (True, runs["m"].id)
    assert book.request_taken(plain) == (True, runs["n"].id)
    # a request withdrawn before a run took it is not run
    gone = book.request("m", False, "cli:harvest", T0)
    assert book.withdraw_request(gone, T0)
    assert step(sched) == [] and book.request_taken(gone) == (True, None)


def test_a_run_cancelled_on_request_ends_cancelled_and_is_not_run_again(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    jobs.hold = threading.Event()
    s = settings(tmp_path, source("a", schedule="manual"), window="")
    sched = make(tmp_path, s, clock, jobs)
    rid = sched.book.request("a", False, "cli:harvest", T0)
    assert sched.tick() == ["a"]
    _, run_id = sched.book.request_taken(rid)
    assert run_id is not None and sched.book.request_cancel(run_id, T0)
    sched.tick()  # the scheduler hears it within a tick
    sched.wait(10)
    run = sched.book.run(run_id)
    assert run is not None and run.status == "cancelled"
    assert not sched.book.request_cancel(run_id, T0)  # ended: nothing to cancel
    state = sched.book.state("a")
    assert state is not None and state.retry_at is None  # asked to stop: not run again
    jobs.hold.set()
    assert step(sched) == []


def test_an_older_book_gets_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    store = tmp_path / "store"
    store.mkdir()
    old = sqlite3.connect(store / "schedule.sqlite3")
    old.executescript(
        "CREATE TABLE requests (id INTEGER PRIMARY KEY, source TEXT NOT NULL, full INTEGER"
        " NOT NULL, requested TEXT NOT NULL, by TEXT NOT NULL DEFAULT '', taken TEXT);"
        "INSERT INTO requests (source, full, requested)"
        " VALUES ('a', 1, '2026-11-23T08:00:00+00:00');"
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, source TEXT NOT NULL, reason TEXT NOT NULL,"
        " full INTEGER NOT NULL, started TEXT NOT NULL, ended TEXT, status TEXT NOT NULL,"
        " job_id INTEGER, pid INTEGER NOT NULL, message TEXT NOT NULL DEFAULT '');"
    )
    old.commit()
    old.close()
    book = Book(store)
    try:
        [req] = book.pending_requests()
        assert (req.source, req.full, req.force, req.allow_mass_withdrawal) == (
            "a",
            True,
            False,
            False,
        )
        run_id = book.start_run("a", "manual", True, T0, [req.id])
        assert book.request_taken(req.id) == (True, run_id)
        assert book.request_cancel(run_id, T0) and book.cancels_requested() == [run_id]
    finally:
        book.close()


# -- parallel limits, one job per source ----------------------------------------------------
def test_parallel_limit_and_one_job_per_source(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    jobs.hold = threading.Event()
    s = settings(tmp_path, *(source(n) for n in "abc"), parallel=2)
    sched = make(tmp_path, s, clock, jobs)
    clock.at(0, 22)
    assert len(sched.tick()) == 2
    request_harvest(s, "a")
    request_harvest(s, "b")
    assert sched.tick() == []  # both slots taken; a and b already run
    [running] = [x for x in schedule_status(s, clock.now()) if x.source == "a"]
    assert running.running and running.requested == 1
    jobs.hold.set()
    sched.wait(10)
    started = step(sched)
    assert sorted(started) == ["a", "b"]  # their requests, now that they are free
    assert step(sched) == ["c"]
    assert jobs.peak == 2
    assert sorted(jobs.sources()) == ["a", "a", "b", "b", "c"]


# -- retries and the circuit breaker --------------------------------------------------------
def test_failed_jobs_are_retried_with_exponential_backoff_and_jitter(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("a"), window="", retries=3, retry_delay=60, breaker_failures=10)
    jobs.results["a"] = [JobResult("failed", 1, "connection refused")] * 4
    sched = make(tmp_path, s, clock, jobs)
    book = sched.book
    waits = []
    for _ in range(3):
        step(sched)
        state = book.state("a")
        assert state is not None and state.retry_at is not None
        waits.append((state.retry_at - clock.now()).total_seconds())
        clock.t = state.retry_at - timedelta(seconds=1)
        assert step(sched) == []  # not before its time
        clock.t = state.retry_at
    # attempt n waits 60 * 2**(n-1) s, scaled by a random factor in [0.5, 1)
    for n, wait in enumerate(waits, 1):
        assert 60 * 2 ** (n - 1) * 0.5 <= wait < 60 * 2 ** (n - 1)
    assert len(set(w / 2**i for i, w in enumerate(waits))) == 3  # jittered
    assert step(sched) == ["a"]  # the third retry fails too: no more retries
    state = book.state("a")
    assert state is not None and state.retry_at is None and state.failures == 4
    assert state.due is not None and state.due == T0 + timedelta(days=1)
    assert state.breaker == "closed" and state.failing_since == T0
    clock.t = state.due
    assert step(sched) == ["a"]  # the next due run succeeds
    state = book.state("a")
    assert state is not None and state.failures == 0 and state.failing_since is None


def test_circuit_breaker_opens_skips_and_closes_after_a_probe(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(
        tmp_path,
        source("a", schedule="hourly"),
        window="",
        retries=0,
        breaker_failures=3,
        breaker_backoff=6 * 3600,
    )
    jobs.results["a"] = [JobResult("failed", n, "HTTP 503") for n in range(4)]
    sched = make(tmp_path, s, clock, jobs)
    for hour in range(3):
        clock.at(0, 8 + hour, 1)
        assert step(sched) == ["a"]
    state = sched.book.state("a")
    assert state is not None and state.breaker == "open" and state.failures == 3
    assert state.breaker_until == T0.replace(hour=10, minute=1) + timedelta(hours=6)
    [status] = schedule_status(s, clock.now())
    assert "circuit breaker OPEN after 3 failed job(s)" in describe(status)
    assert status.next_run == state.breaker_until
    for hour in range(11, 16):  # hourly, but skipped while open
        clock.at(0, hour, 30)
        assert step(sched) == []
    clock.t = state.breaker_until
    assert step(sched) == ["a"]  # the probe fails: open again
    state = sched.book.state("a")
    assert state is not None and state.breaker == "open" and state.failures == 4
    assert state.breaker_until is not None
    clock.t = state.breaker_until
    assert step(sched) == ["a"]  # this probe succeeds: closed
    state = sched.book.state("a")
    assert state is not None and state.breaker == "closed" and state.failures == 0
    runs = [r.reason for r in reversed(sched.book.runs("a"))]
    assert runs == ["scheduled"] * 3 + ["probe", "probe"]


def test_a_busy_store_is_no_failure(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("a"), window="", busy_delay=60)
    jobs.results["a"] = [StoreBusyError("the store is being written by process 1")]
    sched = make(tmp_path, s, clock, jobs)
    assert step(sched) == ["a"]
    state = sched.book.state("a")
    assert state is not None and state.failures == 0 and state.retry_at == T0 + timedelta(minutes=1)
    clock.t = T0 + timedelta(minutes=1)
    assert step(sched) == ["a"]
    assert sched.book.state("a").last_status == "succeeded"  # type: ignore[union-attr]


def test_a_crashing_job_function_is_a_failed_job(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("a"), window="")
    jobs.results["a"] = [RuntimeError("boom")]
    sched = make(tmp_path, s, clock, jobs)
    step(sched)
    state = sched.book.state("a")
    assert state is not None and state.last_status == "failed"
    assert state.last_error == "internal error: RuntimeError: boom"


# -- restarts, full re-harvests -------------------------------------------------------------
def test_a_job_running_when_the_process_died_is_failed_and_retried(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("a"), window="", retry_delay=60)
    book = Book(s.store_path)
    book.start_run("a", "scheduled", False, T0 - timedelta(hours=1))
    book.close()
    sched = make(tmp_path, s, clock, jobs)
    assert sched.recover() == ["a"]
    [run] = sched.book.runs("a")
    assert run.status == "failed" and "process ended during this job" in run.message
    state = sched.book.state("a")
    assert state is not None and state.failures == 1 and state.retry_at is not None
    assert sched.recover() == []


def test_cancelled_jobs_run_again(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    jobs.hold = threading.Event()
    s = settings(tmp_path, source("a"), window="")
    sched = make(tmp_path, s, clock, jobs)
    assert sched.tick() == ["a"]
    sched.shutdown(10)
    [run] = sched.book.runs("a")
    assert run.status == "cancelled"
    jobs.hold.set()
    sched2 = make(tmp_path, s, clock, jobs)
    assert step(sched2) == ["a"]


def test_incremental_sources_get_a_weekly_full_reharvest(tmp_path: Path) -> None:
    clock, jobs = Clock(), Jobs()
    s = settings(tmp_path, source("a"), source("b", full_every="never"), window="")
    sched = make(tmp_path, s, clock, jobs)
    jobs.results["a"] = [JobResult("succeeded", 2, "", False)] * 10  # listed by checkpoint
    fulls = []
    for day in range(9):
        clock.at(day, 8)
        step(sched)
        fulls += [(c[0], day) for c in jobs.calls[-2:] if c[1]]
    assert [d for n, d in fulls if n == "a"] == [0, 7]
    assert [d for n, d in fulls if n == "b"] == []
