"""Checking a password or token without letting anyone stall the server with it.

One check is one scrypt (16 MiB and tens of milliseconds of CPU, on purpose:
docs/benchmarks.md#dashboard). Run on the event loop, a few
clients sending junk tokens would stall every page of the serving process; run in threads
without a bound, they would take every CPU. So each check

1. is counted for its client address first (:meth:`.AuthState.begin_attempt`, shared by every
   serving process): past ``[serve] admin_max_failures`` failures in ``admin_failure_window``
   seconds, the answer is 429 with ``Retry-After`` and nothing is hashed;
2. then waits, without holding a thread, for one of ``admin_hash_concurrency`` slots of this
   process and hashes in a worker thread (``hashlib.scrypt`` lets go of the GIL), so the event
   loop keeps answering everything else;
3. is forgotten when it matched: only failures count.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import anyio.to_thread
from starlette.concurrency import run_in_threadpool

from aggregator.core.errors import AggregatorError
from aggregator.serve.dashboard.auth_state import AuthState, Refused, client_key


class TooManyAttemptsError(AggregatorError):
    http_status = 429
    code = "tooManyAttempts"

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"too many failed logins or tokens from your address: try again in {retry_after} s"
        )
        self.retry_after = retry_after


class SecretChecks:
    def __init__(self, state: AuthState, *, limit: int, window: float, concurrency: int) -> None:
        self.state = state
        self.limit = limit
        self.window = window
        self.concurrency = concurrency
        self._slots: anyio.CapacityLimiter | None = None  # made in the event loop, when needed

    async def check(self, client: str | None, verify: Callable[[], bool]) -> bool:
        """``verify()`` (a hash check) for a request from ``client`` (its address), off the
        event loop; raises :class:`TooManyAttemptsError` before hashing anything when the
        client is over its limit."""
        key = client_key(client)
        begun = await run_in_threadpool(
            self.state.begin_attempt, key, time.time(), self.limit, self.window
        )
        if isinstance(begun, Refused):
            raise TooManyAttemptsError(begun.retry_after)
        if self._slots is None:
            self._slots = anyio.CapacityLimiter(self.concurrency)
        matched = await anyio.to_thread.run_sync(verify, limiter=self._slots)
        if matched:
            await run_in_threadpool(self.state.succeeded, begun)
        return matched
