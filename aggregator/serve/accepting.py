"""Which serving processes accept new connections: all but one, the standby.

Every serving process of ``aggregator serve`` can accept on the supervisor's one listening
socket, but when several wait in ``accept`` each new connection wakes all of them, and on a
small machine the processes also split the ready connections between them, so each wake-up
does less work: two accepting processes spend far more CPU per point query than one
accepting process beside an idle one (docs/benchmarks.md#serving). So ``acceptors`` processes
(all but one) accept, and the last is a hot standby that
accepts only while an accepting process cannot: its event loop is stuck (a SPARQL query
running inline, a long page), it is starting, or it has gone.

They agree through an :class:`AcceptBoard`, a little shared memory the supervisor creates and
passes to each serving process: per slot, the ``CLOCK_MONOTONIC`` time of its event loop's
last heartbeat (every :data:`BEAT` seconds) and whether it accepts now. A slot whose
heartbeat is older than :data:`STALE` seconds counts as gone. The accepting slots are the
first ``acceptors`` live ones, in slot order; each process decides for itself, in its own
event loop, at each heartbeat (:class:`AcceptSwitch`): nothing is sent between processes,
and a stuck process needs to do nothing for another to take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import socket
import struct
import tempfile
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

BEAT = 0.02  # seconds between heartbeats of a serving process's event loop
STALE = 0.1  # a heartbeat older than this: the process is stuck or gone
_SLOT = struct.Struct("=qq")  # last heartbeat (monotonic ns, 0: none), accepting (0/1)


class AcceptBoard:
    """Per slot: last heartbeat and whether it accepts, in memory shared by the supervisor
    and its serving processes (an anonymous memory file; its descriptor is inherited)."""

    def __init__(self, fd: int, slots: int) -> None:
        if slots < 1:
            raise ValueError("at least one slot")
        self.fd = fd
        self.slots = slots
        self._map = mmap.mmap(fd, _SLOT.size * slots)

    @classmethod
    def create(cls, slots: int) -> AcceptBoard:
        size = _SLOT.size * slots
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("aggregator-accept-board", 0)
        else:  # pragma: no cover - not Linux: an unlinked temporary file does the same
            fh = tempfile.TemporaryFile()  # noqa: SIM115 - its descriptor outlives it
            fd = os.dup(fh.fileno())
            fh.close()
        os.ftruncate(fd, size)
        return cls(fd, slots)

    def close(self) -> None:
        self._map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    # -- one slot -----------------------------------------------------------------------------
    def beat(self, slot: int, accepting: bool, now_ns: int | None = None) -> None:
        now = time.monotonic_ns() if now_ns is None else now_ns
        _SLOT.pack_into(self._map, slot * _SLOT.size, now, int(accepting))

    def clear(self, slot: int) -> None:
        """The slot has no serving process (it ended, or is shutting down)."""
        _SLOT.pack_into(self._map, slot * _SLOT.size, 0, 0)

    # -- all slots ----------------------------------------------------------------------------
    def live(self, now_ns: int | None = None) -> list[bool]:
        """Per slot: its event loop beat within :data:`STALE` seconds."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        stale = int(STALE * 1e9)
        out = []
        for slot in range(self.slots):
            beat, _ = _SLOT.unpack_from(self._map, slot * _SLOT.size)
            out.append(beat > 0 and now - beat <= stale)
        return out

    def accepting(self, now_ns: int | None = None) -> list[bool]:
        """Per slot: it accepts new connections now (live and says so)."""
        live = self.live(now_ns)
        return [
            live[slot] and bool(_SLOT.unpack_from(self._map, slot * _SLOT.size)[1])
            for slot in range(self.slots)
        ]

    def should_accept(self, slot: int, acceptors: int, now_ns: int | None = None) -> bool:
        """Whether ``slot`` (live: it asks) is one of the first ``acceptors`` live slots."""
        live = self.live(now_ns)
        live[slot] = True
        return slot in [s for s, up in enumerate(live) if up][:acceptors]


def acceptors_for(processes: int) -> int:
    """All processes accept but one standby (a single process accepts)."""
    return max(1, processes - 1)


class AcceptSwitch:
    """In a serving process: at each heartbeat of its event loop, write the heartbeat and
    start or stop accepting on the listening socket as the board says.

    ``open_server(sock)`` must start serving on ``sock`` (a fresh duplicate of the listening
    socket each time: closing a server closes its socket); ``servers`` is the list the web
    server closes on shutdown, kept up to date."""

    def __init__(
        self,
        board: AcceptBoard,
        slot: int,
        acceptors: int,
        listen_fd: int,
        open_server: Callable[[socket.socket], asyncio.Task[asyncio.Server]],
        servers: list[asyncio.Server],
    ) -> None:
        self.board = board
        self.slot = slot
        self.acceptors = acceptors
        self.listen_fd = listen_fd
        self.open_server = open_server
        self.servers = servers
        self.server: asyncio.Server | None = None
        self._opening: asyncio.Task[asyncio.Server] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self._failing = False  # the last attempt to accept failed (logged once)
        self.switches = 0  # times it started or stopped accepting

    @property
    def accepting(self) -> bool:
        return self.server is not None

    def start(self) -> None:
        """Beat now and every :data:`BEAT` seconds (call in the event loop)."""
        self._tick()

    def stop(self) -> None:
        """Stop beating and accepting; the slot reads as gone at once."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        self._close()
        self.board.clear(self.slot)

    def _tick(self) -> None:
        if self._stopped:
            return
        want = self.board.should_accept(self.slot, self.acceptors)
        if want and self.server is None and self._opening is None:
            sock = socket.socket(fileno=os.dup(self.listen_fd))
            self._opening = self.open_server(sock)
            self._opening.add_done_callback(lambda task: self._opened(task, sock))
        elif not want and self.server is not None:
            self._close()
        self.board.beat(self.slot, self.server is not None)
        self._timer = asyncio.get_running_loop().call_later(BEAT, self._tick)

    def _opened(self, task: asyncio.Task[asyncio.Server], sock: socket.socket) -> None:
        self._opening = None
        err = None if task.cancelled() else task.exception()
        if task.cancelled() or err is not None:  # tried again at the next heartbeat
            sock.close()
            if err is not None and not self._failing:
                log.error("cannot accept on the listening socket (retrying): %s", err)
            self._failing = err is not None
            return
        self._failing = False
        server = task.result()
        if self._stopped:
            server.close()
            return
        self.server = server
        self.servers.append(server)
        self.switches += 1
        self.board.beat(self.slot, True)

    def _close(self) -> None:
        if self.server is None:
            return
        self.server.close()
        with contextlib.suppress(ValueError):
            self.servers.remove(self.server)
        self.server = None
        self.switches += 1
