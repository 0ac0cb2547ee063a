"""A serving process of ``aggregator serve``: the whole app under uvicorn on the supervisor's
listening socket (``python -m aggregator.serve.worker``, a pickled
:class:`~aggregator.serve.supervisor.WorkerSpec` on stdin). It accepts new connections when
the accept board says so (:mod:`aggregator.serve.accepting`: all processes but one standby).

Before anything else it asks to die with its supervisor and denies itself IP networking
(:mod:`aggregator.serve.sparql_sandbox`: it only accepts on the socket it was given, so a
``SERVICE`` clause that got past the guard still cannot reach another host). It reads the
state database read-only and the SPARQL snapshots whichever process writes the store publishes;
it never opens the read-write store.

It gives the SPARQL runner its :class:`~aggregator.serve.sparql_runner.Supervision` hooks:

- ``quiet``: no response is half-sent (started and not complete, or still buffered), so a
  query may run inline: should it run past its deadline, ending the process cuts nothing;
- ``overrun`` (watchdog thread, the loop being stuck in the engine): answer the query's client
  with a 503, answer every request not yet answered (read, or sent meanwhile) with a 503
  too ("retry"), and exit at once with :data:`EXIT_OVERRUN`;
- ``retire`` (loop thread): uvicorn's graceful shutdown, then exit with :data:`EXIT_RETIRED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import os
import pickle
import select
import signal
import socket
import sys
from typing import Any, NoReturn

from aggregator.core.process import die_with_parent
from aggregator.serve.accepting import AcceptBoard, AcceptSwitch
from aggregator.serve.sparql_sandbox import deny_network
from aggregator.serve.supervisor import EXIT_OVERRUN, EXIT_RETIRED, WorkerSpec

log = logging.getLogger(__name__)
_QUIET_MAX_CONNECTIONS = 64  # past this many open connections, do not scan them: use a thread


def _response_503(message: str, retry_after: int) -> bytes:
    body = (message + "\n").encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "content-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\n"
        f"retry-after: {retry_after}\r\n"
        "access-control-allow-origin: *\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Hooks:
    """The supervision hooks over one uvicorn server (set once the server exists)."""

    def __init__(self) -> None:
        self.server: Any = None  # uvicorn.Server
        self.retired = False

    def quiet(self) -> bool:
        """No response is half-sent (started, not complete, or still in a write buffer):
        ending the process now would cut none. Requests not yet answered are fine: they get
        a 503 "retry" if it comes to that."""
        connections = self.server.server_state.connections
        if len(connections) > _QUIET_MAX_CONNECTIONS:
            return False
        for conn in connections:
            cycle = getattr(conn, "cycle", None)
            if cycle is not None and cycle.response_started and not cycle.response_complete:
                return False
            transport = conn.transport
            if transport is not None and transport.get_write_buffer_size():
                return False
        return True

    def overrun(self, client: tuple[str, int] | None, timeout: float) -> NoReturn:
        try:
            mine = _response_503(
                f"the query ran past the {timeout:g} s limit of this endpoint",
                max(1, math.ceil(timeout)),
            )
            others = _response_503("this server process is restarting: retry", 1)
            for conn in list(self.server.server_state.connections):
                transport = conn.transport
                if transport is None:
                    continue
                sock = transport.get_extra_info("socket")
                if sock is None:
                    continue
                fd = sock.fileno()
                cycle = getattr(conn, "cycle", None)
                if conn.client == client:
                    _write_all(fd, mine)
                elif cycle is not None and not cycle.response_started:
                    _write_all(fd, others)  # read, not answered yet
                elif select.select([fd], [], [], 0)[0]:  # sent while we were stuck
                    _write_all(fd, others)
            log.warning("SPARQL query over its %.1f s deadline: this serving process ends", timeout)
        finally:
            os._exit(EXIT_OVERRUN)

    def retire(self) -> None:
        self.retired = True
        self.server.should_exit = True


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def main() -> int:
    spec: WorkerSpec = pickle.load(sys.stdin.buffer)  # noqa: S301 - from our supervisor
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    die_with_parent(signal.SIGKILL)
    if os.getppid() != spec.parent:  # the supervisor died before the request above
        return 1
    sandboxed = deny_network()  # before any thread starts

    import uvicorn

    from aggregator.serve.app import create_app
    from aggregator.serve.sparql_runner import Supervision
    from aggregator.store.names import StoreNames

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    hooks = _Hooks()
    aggregate = create_app(
        StoreNames(spec.store_path, spec.base_iri),
        spec.settings,
        oai_key=spec.oai_key,
        snapshot_root=spec.snapshot_root,
        supervision=Supervision(hooks.quiet, hooks.overrun, hooks.retire),
    )
    config = uvicorn.Config(
        aggregate.asgi,
        interface="asgi3",
        log_level="warning",
        # no access log (uvicorn formats each line, URL-decoding the query string, even when
        # the level drops it) and no proxy-header rewriting of the client address: the
        # deadline watchdog finds the query's connection by that address, and every URL we
        # publish comes from the configured base IRI, not from the request
        access_log=False,
        proxy_headers=False,
        lifespan="on",
        timeout_graceful_shutdown=max(5, math.ceil(spec.settings.serve.sparql_timeout)),
    )
    board = AcceptBoard(spec.board_fd, spec.slots)

    class Server(uvicorn.Server):
        """uvicorn, except that an :class:`AcceptSwitch` decides when this process accepts."""

        switch: AcceptSwitch | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=[])  # no listening server of uvicorn's own
            if not self.started:
                return
            config = self.config
            # the protocol factory uvicorn's own startup makes
            protocol = functools.partial(  # type: ignore[call-arg]
                config.http_protocol_class,
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
            )
            loop = asyncio.get_running_loop()

            def open_server(sock: socket.socket) -> asyncio.Task[asyncio.Server]:
                return loop.create_task(
                    loop.create_server(protocol, sock=sock, backlog=config.backlog)
                )

            self.switch = AcceptSwitch(
                board, spec.index, spec.acceptors, spec.listen_fd, open_server, self.servers
            )
            self.switch.start()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.switch is not None:
                self.switch.stop()  # the standby takes new connections from now on
            await super().shutdown(sockets)

    server = Server(config)
    hooks.server = server
    report = {"pid": os.getpid(), "sandboxed": sandboxed, "index": spec.index}
    os.write(spec.status_fd, (json.dumps(report) + "\n").encode())
    os.close(spec.status_fd)
    server.run()
    # daemon threads may still run a query nobody waits for: do not wait for them
    os._exit(EXIT_RETIRED if hooks.retired else 0)


if __name__ == "__main__":
    sys.exit(main())
