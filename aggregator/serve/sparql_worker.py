"""The SPARQL worker process: runs one query at a time on a read-only store snapshot.

Started by :class:`aggregator.serve.sparql_pool.WorkerPool` as
``python -m aggregator.serve.sparql_worker FD PARENT_PID``, where FD is its end of a Unix
socket pair. Before anything else it asks to die with its parent and denies itself IP
networking (:mod:`aggregator.serve.sparql_sandbox`). It answers a ready frame, then serves
requests until the socket closes. The parent kills it at the query deadline: pyoxigraph's
``query()`` cannot be interrupted, a process can.

Frames: a 4-byte big-endian length, then the payload. A request is a JSON object (see
:func:`execute`); a response is a 4-byte header length, a JSON header (``status`` plus
``media_type`` or ``message``) and the body. The body is always complete: results are
serialised in full here, and the row cap is checked while serialising, so the web layer never
starts a response it might have to truncate.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
from typing import Any

from pyoxigraph import Store

from aggregator.serve.sparql_exec import error as _error
from aggregator.serve.sparql_exec import execute
from aggregator.serve.sparql_sandbox import deny_network, die_with_parent

_LEN = struct.Struct(">I")
MAX_FRAME = 1 << 31


def recv_exact(sock: socket.socket, size: int) -> bytes | None:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes | None:
    head = recv_exact(sock, 4)
    if head is None:
        return None
    return recv_exact(sock, _LEN.unpack(head)[0])


def send_response(sock: socket.socket, header: dict[str, Any], body: bytes = b"") -> None:
    meta = json.dumps(header).encode()
    sock.sendall(_LEN.pack(4 + len(meta) + len(body)) + _LEN.pack(len(meta)) + meta + body)


def serve(sock: socket.socket, sandboxed: bool) -> None:
    send_response(sock, {"ready": True, "sandboxed": sandboxed, "pid": os.getpid()})
    store: Store | None = None
    opened: str | None = None
    while True:
        frame = recv_frame(sock)
        if frame is None:
            return
        req = json.loads(frame)
        try:
            if req["snapshot"] != opened:
                store = None  # close the old snapshot before opening the new one
                store = Store.read_only(req["snapshot"])
                opened = req["snapshot"]
            assert store is not None
            header, body = execute(store, req)
        except (OSError, ValueError, TypeError) as err:
            header, body = _error(500, f"query failed: {err}")
        send_response(sock, header, body)


def main(argv: list[str]) -> int:
    fd, parent = int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request above took effect
        return 1
    sandboxed = deny_network()  # before the store opens and any thread starts
    sock = socket.socket(fileno=fd)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        serve(sock, sandboxed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
