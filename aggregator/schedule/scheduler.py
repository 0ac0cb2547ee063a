"""The scheduler: decides which source to harvest when, and runs the jobs.

Each :meth:`Scheduler.tick` (every second in :meth:`Scheduler.run_forever`) collects the jobs
that ended, then starts the sources that are due, up to ``[schedule] parallel`` jobs at once
and never two of one source. A source is due when

- a "harvest now" request waits for it (``aggregator schedule now``, the dashboard,
  ``aggregator harvest`` handing its job over): at once, whatever the window, blackouts,
  breaker or ``enabled``; a request may ask for a full, forced job, or one allowed a mass
  withdrawal, and its requester may ask to cancel the run that took it (a run cancelled on
  request is not run again);
- its circuit breaker is open and the back-off has passed: one probe job;
- a retry of a failed job is due: after ``retry_delay`` seconds, doubling per attempt up to
  ``retry_max_delay``, each scaled by a random factor in [0.5, 1) (jitter);
- its next due time (from its frequency, :mod:`aggregator.config.timing`) has come;

and, except for requests, the moment is allowed: inside the harvest window (named frequencies
only) and outside the source's blackout periods. A job is a full re-harvest when the last full
one is older than ``full_every``.

After ``breaker_failures`` consecutive failed jobs the breaker opens: the source is skipped
for ``breaker_backoff`` seconds, then one probe job runs; a success closes the breaker, a
failure opens it again. Another process writing the store (a CLI harvest) is no failure: the
job is tried again ``busy_delay`` seconds later.

Jobs survive restarts: a run left ``running`` in the book by a process that died is marked
failed at the next start and goes through the retry rules. Time comes from an injected
:class:`Clock`, so the tests drive days of schedule in milliseconds.

Upkeep: every ``[retention] interval`` seconds (a day), at a tick when no job runs, the
scheduler prunes the store by its retention policy (``prune``, as the store's writer, in a
thread of its own; jobs due meanwhile start beside it, as its batches are short). When it
last did, and what it freed, is in the book (``maintenance``); another process writing the
store puts it off by ``busy_delay``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from aggregator.config import Settings, SourceConfig
from aggregator.config.timing import (
    DailyRange,
    Timing,
    parse_frequency,
    parse_period,
    parse_timezone,
)
from aggregator.core.errors import AggregatorError, ConfigError, StoreBusyError
from aggregator.schedule.book import Book, Request, SourceState

log = logging.getLogger(__name__)

REASONS = ("manual", "probe", "retry", "scheduled")  # in the order they are started


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class JobResult:
    """How a job ended: a job status (``succeeded``, ``partial``, ``failed``, ``cancelled``)
    or ``busy`` (it could not start: another process writes the store)."""

    status: str
    job_id: int | None = None
    message: str = ""
    full_listing: bool = False  # the listing was a full one (it may save ``last_full``)


class RunJob(Protocol):
    """Runs one job: (settings, source name, full, cancel event, options) -> result."""

    def __call__(
        self,
        settings: Settings,
        source: str,
        full: bool,
        cancel: threading.Event,
        *,
        force: bool = False,
        allow_mass_withdrawal: bool = False,
    ) -> JobResult: ...


#: prunes the store as of a moment: (settings, now, stop event) -> what it freed, in words
Prune = Callable[[Settings, datetime, threading.Event], list[str]]
PRUNE = "prune"  # the book's name of the upkeep task


@dataclass(eq=False)
class RunningJob:
    source: str
    run_id: int
    reason: str
    full: bool
    started: datetime
    cancel: threading.Event
    future: Future[JobResult] = field(default_factory=Future)
    stop_requested: bool = False  # cancelled on request: not run again


def timing_of(settings: Settings, src: SourceConfig) -> Timing:
    sched = settings.schedule
    tz = parse_timezone(sched.timezone)
    window = parse_period(sched.window, tz) if sched.window else None
    if window is not None and not isinstance(window, DailyRange):
        raise ConfigError("[schedule]: window must be a daily time range such as 22:00-06:00")
    blackouts = tuple(parse_period(b, tz) for b in src.blackout)
    return Timing(window, blackouts, tz)


def needs_full(settings: Settings, src: SourceConfig, state: SourceState, now: datetime) -> bool:
    every = src.full_every or settings.schedule.full_every
    if every == "never":
        return False
    if state.last_full is None:
        return True
    nxt = parse_frequency(every).next_after(state.last_full)
    return nxt is not None and nxt <= now


class Scheduler:
    def __init__(
        self,
        settings: Settings | Callable[[], Settings],
        book: Book,
        run_job: RunJob,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        prune: Prune | None = None,
    ) -> None:
        self._settings = settings
        self.book = book
        self.run_job = run_job
        self.prune = prune
        self.pruning: Future[list[str]] | None = None
        self._prune_started = datetime.min.replace(tzinfo=UTC)
        self._prune_not_before = datetime.min.replace(tzinfo=UTC)
        self._prune_stop = threading.Event()
        self._upkeep = ThreadPoolExecutor(1, thread_name_prefix="upkeep")
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.running: dict[str, RunningJob] = {}
        first = self.settings
        self._pool = ThreadPoolExecutor(first.schedule.parallel, thread_name_prefix="job")
        self._parallel = first.schedule.parallel
        self._timings: tuple[Settings | None, dict[str, Timing]] = (None, {})
        self._not_before: dict[tuple[str, bool], tuple[Settings, datetime]] = {}

    @property
    def settings(self) -> Settings:
        s = self._settings
        return s if isinstance(s, Settings) else s()

    # -- the loop -----------------------------------------------------------------------------
    def run_forever(
        self,
        stop: threading.Event,
        interval: float = 1.0,
        each_tick: Callable[[Settings], None] | None = None,
    ) -> None:
        """Tick until ``stop`` is set, then cancel the running jobs and wait for them;
        ``each_tick`` runs after every tick (the notifier's escalations and digests)."""
        self.recover()
        while not stop.is_set():
            try:
                self.tick()
                if each_tick is not None:
                    each_tick(self.settings)
            except AggregatorError as err:  # a broken configuration reloaded: keep running
                log.error("scheduler: %s", err.message)
            stop.wait(interval)
        self.shutdown()

    def recover(self) -> list[str]:
        """Runs left ``running`` by a process that died: failed, then retried by the rules."""
        now = self.clock.now()
        found = []
        for run in self.book.running():
            message = "the scheduler's process ended during this job (found at its next start)"
            self.book.end_run(run.id, "failed", run.job_id, message, now)
            self._account(run.source, run.reason, run.started, JobResult("failed", None, message))
            log.warning("job of %s left running by process %d: failed", run.source, run.pid)
            found.append(run.source)
        return found

    def tick(self) -> list[str]:
        """Collect ended jobs, cancel those asked to stop, start due ones; return the
        sources started."""
        self.collect()
        self._honour_cancels()
        now = self.clock.now()
        settings = self.settings
        states = self.book.states()
        requests: dict[str, list[Request]] = {}
        for req in self.book.pending_requests():
            if req.source not in settings.sources:
                self.book.take_requests(req.source, now)
                log.warning("harvest request for %r ignored: no such source", req.source)
                continue
            requests.setdefault(req.source, []).append(req)
        unseen = [
            self._new_state(src, now) for n, src in settings.sources.items() if n not in states
        ]
        if unseen:
            self.book.save(*unseen)
            states.update((st.source, st) for st in unseen)
        due: list[tuple[int, datetime, str, str, bool]] = []
        for name, src in settings.sources.items():
            if name in self.running:
                continue
            state = states[name]
            decision = self._decide(settings, src, state, now, requests.get(name, []))
            if decision is not None:
                reason, full = decision
                when = state.due or state.retry_at or now
                due.append((REASONS.index(reason), when, name, reason, full))
        started = []
        for _, _, name, reason, full in sorted(due):
            if len(self.running) >= min(settings.schedule.parallel, self._parallel):
                break
            self._start(settings, settings.sources[name], reason, full, now)
            started.append(name)
        self._upkeep_due(settings, now)
        return started

    # -- upkeep -------------------------------------------------------------------------------
    def _upkeep_due(self, settings: Settings, now: datetime) -> None:
        """Start a prune when one is due and no job runs (collecting the last one first)."""
        self.collect_prune()
        interval = settings.retention.interval
        if self.prune is None or self.pruning is not None or self.running or interval <= 0:
            return
        if now < self._prune_not_before:
            return
        last = self.book.last_maintenance(PRUNE)
        if last is not None and now < last[0] + timedelta(seconds=interval):
            return
        log.info("pruning the store by its retention policy")
        self._prune_started = now
        self.pruning = self._upkeep.submit(self.prune, settings, now, self._prune_stop)

    def collect_prune(self, timeout: float | None = 0) -> None:
        """Account for a prune that ended (waiting up to ``timeout`` seconds; None: until
        it ends)."""
        pruning = self.pruning
        if pruning is None:
            return
        try:
            lines = pruning.result(timeout)
        except TimeoutError:
            return
        except StoreBusyError as err:
            self.pruning = None
            self._prune_not_before = self.clock.now() + timedelta(
                seconds=self.settings.schedule.busy_delay
            )
            log.info("prune put off: %s", err.message)
            return
        except Exception as err:  # logged and noted: tried again after the interval
            self.pruning = None
            message = err.message if isinstance(err, AggregatorError) else repr(err)
            log.error("prune failed: %s", message)
            self.book.note_maintenance(PRUNE, self._prune_started, f"failed: {message}")
            return
        self.pruning = None
        for line in lines:
            log.info("%s", line)
        self.book.note_maintenance(PRUNE, self._prune_started, "\n".join(lines))

    def collect(self) -> list[RunningJob]:
        """Account for the jobs that ended."""
        done = [job for job in self.running.values() if job.future.done()]
        for job in done:
            del self.running[job.source]
            result = job.future.result()  # _call never raises
            now = self.clock.now()
            self.book.end_run(job.run_id, result.status, result.job_id, result.message, now)
            self._account(job.source, job.reason, job.started, result, job.stop_requested)
        return done

    def _honour_cancels(self) -> None:
        wanted = set(self.book.cancels_requested())
        for job in self.running.values():
            if job.run_id in wanted and not job.stop_requested:
                log.info("cancelling the job of %s (asked to)", job.source)
                job.stop_requested = True
                job.cancel.set()

    def wait(self, timeout: float | None = None) -> list[RunningJob]:
        """Wait for the running jobs to end, then account for them (tests, shutdown)."""
        for job in list(self.running.values()):
            job.future.exception(timeout)
        return self.collect()

    def shutdown(self, grace: float | None = None) -> None:
        """Cancel the running jobs (each ends ``cancelled``), wait for them, stop."""
        for job in self.running.values():
            job.cancel.set()
        self._prune_stop.set()  # a prune stops between two batches
        self.wait(grace)
        self.collect_prune(grace)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._upkeep.shutdown(wait=False, cancel_futures=True)

    # -- decisions ----------------------------------------------------------------------------
    def _new_state(self, src: SourceConfig, now: datetime) -> SourceState:
        """A source the scheduler has not seen: due at once (at the next allowed moment)."""
        manual = parse_frequency(src.schedule).manual
        return SourceState(src.name, due=None if manual else now)

    def _decide(
        self,
        settings: Settings,
        src: SourceConfig,
        state: SourceState,
        now: datetime,
        requests: list[Request],
    ) -> tuple[str, bool] | None:
        if requests:
            full = needs_full(settings, src, state, now)
            return "manual", full or any(r.full for r in requests)
        if not src.enabled:
            return None
        freq = parse_frequency(src.schedule)
        if state.due is None and not freq.manual:  # was manual until the configuration changed
            state.due = now
            self.book.save(state)
        if state.breaker == "open":
            if state.breaker_until is not None and now < state.breaker_until:
                return None
            reason = "probe"
        elif state.due is not None and state.due <= now:
            reason = "scheduled"
        elif state.retry_at is not None and state.retry_at <= now:
            reason = "retry"
        else:
            return None  # the usual case, decided without the timing
        if not self._allowed(settings, src, now, freq.windowed):
            return None
        return reason, needs_full(settings, src, state, now)

    def _allowed(
        self, settings: Settings, src: SourceConfig, now: datetime, windowed: bool
    ) -> bool:
        """Whether ``now`` is inside the window (if ``windowed``) and outside the blackouts;
        the next allowed moment is remembered, so a source due while the window is closed
        costs one comparison per tick until then."""
        timing = self._timing(settings, src)
        key = (src.name, windowed)
        later = self._not_before.get(key)
        if later is not None and later[0] is settings and now < later[1]:
            return False
        nxt = timing.next_allowed(now, windowed=windowed)
        if nxt == now:
            return True
        self._not_before[key] = (settings, nxt or now + timedelta(days=1))
        return False

    def _timing(self, settings: Settings, src: SourceConfig) -> Timing:
        """The source's window and blackouts, parsed once per configuration."""
        if self._timings[0] is not settings:
            self._timings = (settings, {})
        found = self._timings[1].get(src.name)
        if found is None:
            found = self._timings[1][src.name] = timing_of(settings, src)
        return found

    def _start(
        self, settings: Settings, src: SourceConfig, reason: str, full: bool, now: datetime
    ) -> None:
        state = self.book.state(src.name) or SourceState(src.name)
        taken: list[Request] = []
        if reason == "manual":
            taken = [r for r in self.book.pending_requests() if r.source == src.name]
            full = full or any(r.full for r in taken)
        elif reason == "scheduled" and state.due is not None:
            tz = parse_timezone(settings.schedule.timezone)
            state.due = parse_frequency(src.schedule).next_due(state.due, now, tz)
            state.retry_at = None  # the regular job replaces a pending retry
        elif reason == "probe":
            state.breaker = "half-open"
        elif reason == "retry":
            state.retry_at = None
        self.book.save(state)
        run_id = self.book.start_run(src.name, reason, full, now, [r.id for r in taken])
        job = RunningJob(src.name, run_id, reason, full, now, threading.Event())
        log.info("starting %s job of %s%s", reason, src.name, " (full)" if full else "")
        force = any(r.force for r in taken)
        allow = any(r.allow_mass_withdrawal for r in taken)
        job.future = self._pool.submit(
            self._call, settings, src.name, full, job.cancel, force, allow
        )
        self.running[src.name] = job

    def _call(
        self,
        settings: Settings,
        source: str,
        full: bool,
        cancel: threading.Event,
        force: bool = False,
        allow_mass_withdrawal: bool = False,
    ) -> JobResult:
        try:
            return self.run_job(
                settings,
                source,
                full,
                cancel,
                force=force,
                allow_mass_withdrawal=allow_mass_withdrawal,
            )
        except StoreBusyError as err:
            return JobResult("busy", None, err.message)
        except AggregatorError as err:
            return JobResult("failed", None, err.message)
        except Exception as err:
            log.exception("job of %s crashed", source)
            return JobResult("failed", None, f"internal error: {type(err).__name__}: {err}")

    def backoff(self, attempt: int) -> timedelta:
        """The wait before retry ``attempt`` (1, 2, ...): exponential, capped, jittered."""
        sched = self.settings.schedule
        base = min(sched.retry_max_delay, sched.retry_delay * 2 ** (attempt - 1))
        return timedelta(seconds=base * (0.5 + 0.5 * self.rng.random()))

    def _account(
        self,
        source: str,
        reason: str,
        started: datetime,
        result: JobResult,
        stop_requested: bool = False,
    ) -> None:
        """Fold a job's end into its source's state: retries, breaker, last full listing."""
        now = self.clock.now()
        sched = self.settings.schedule
        state = self.book.state(source) or SourceState(source)
        status = result.status
        if status == "busy":
            later = now + timedelta(seconds=sched.busy_delay)
            if reason == "probe":
                state.breaker, state.breaker_until = "open", later
            else:
                state.retry_at = later
            self.book.save(state)
            log.info(
                "%s: the store is being written by another process; again at %s", source, later
            )
            return
        state.last_status, state.last_job, state.last_end = status, result.job_id, now
        if status == "cancelled":
            if not stop_requested:  # stopped with the scheduler: again at the next moment
                state.retry_at = now
            if reason == "probe":
                state.breaker, state.breaker_until = "open", now
        elif status == "failed":
            state.failures += 1
            state.failing_since = state.failing_since or started
            state.last_error = result.message
            if reason == "probe" or state.failures >= sched.breaker_failures:
                state.breaker = "open"
                state.breaker_until = now + timedelta(seconds=sched.breaker_backoff)
                state.retry_at, state.attempt = None, 0
                log.warning(
                    "%s: circuit breaker open after %d failed job(s); probed again at %s",
                    source,
                    state.failures,
                    state.breaker_until,
                )
            elif state.attempt < sched.retries:
                state.attempt += 1
                state.retry_at = now + self.backoff(state.attempt)
            else:
                state.attempt, state.retry_at = 0, None
        else:  # succeeded or partial: the source answers
            if state.breaker != "closed":
                log.info("%s: circuit breaker closed (the probe succeeded)", source)
            state.failures = state.attempt = 0
            state.retry_at = state.breaker_until = state.failing_since = None
            state.breaker, state.last_error = "closed", None
            if result.full_listing:
                state.last_full = started
        self.book.save(state)
