"""The dashboard's server-side login state, shared by every serving process of a store:
``dashboard.sqlite3`` in the store folder (beside ``dashboard.key``), in WAL mode.

- ``sessions``: the open sessions. Logging in opens one, logging out closes it; a session
  cookie is good only while its id is here, so a copied cookie is worth nothing after its
  owner logs out.
- ``attempts``: password and token checks by client address. Each check is written *before*
  its hash is computed (and deleted again when it succeeds), in one transaction with the
  count, so that concurrent requests of one address, in any serving process, cannot get
  more than their limit of hashes between them.

Nothing here is precious: deleting the file logs everyone out and forgets the counts. It is
made on first use; its layout is versioned by ``PRAGMA user_version``.
"""

from __future__ import annotations

import ipaddress
import math
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from aggregator.core.errors import ConfigError, StoreError

FILE_NAME = "dashboard.sqlite3"
VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_expires ON sessions (expires);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY,
    address TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_address ON attempts (address, at);
CREATE INDEX IF NOT EXISTS attempts_at ON attempts (at);
"""


def client_key(host: str | None) -> str:
    """Whom a limit applies to: the client's IPv4 address, or its IPv6 /64 (one machine
    usually holds a whole /64, so counting single IPv6 addresses would count nothing)."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket path or the like: one client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str, name: str) -> tuple[Network, ...]:
    """``"127.0.0.1, 10.0.0.0/8"`` as networks; a ConfigError names a bad one."""
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            found.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(f"[serve] {name}: {part!r} is not an address or network") from None
    return tuple(found)


def forwarded_client(
    peer: str | None, forwarded_for: str | None, proxies: tuple[Network, ...]
) -> str | None:
    """The client behind our trusted reverse proxies: when ``peer`` is one of them, the last
    address of ``X-Forwarded-For`` that is not (the entries before it could be written by
    anyone); otherwise ``peer`` itself, whatever the header says."""
    if not proxies or not forwarded_for or not _within(peer, proxies):
        return peer
    for entry in reversed(forwarded_for.split(",")):
        entry = entry.strip()
        if not _within(entry, proxies):
            try:
                return str(ipaddress.ip_address(entry))
            except ValueError:
                return peer  # junk where an address goes: count it against the proxy
    return peer


def _within(host: str | None, networks: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return any(address in network for network in networks)


@dataclass(frozen=True, slots=True)
class Refused:
    """Too many failed checks from one client: try again after this many seconds."""

    retry_after: int


class AuthState:
    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE_NAME
        self._local = threading.local()
        self._connect()  # make the file and its tables now: errors show at start-up

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # losing the last second of it is harmless
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > VERSION:
            conn.close()
            raise StoreError(
                f"{self.path} was written by a newer version of the aggregator "
                "(delete it: it holds only sessions and login attempts)"
            )
        if version < VERSION:
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version = {VERSION}")
        self._local.conn = conn
        return conn

    # -- sessions -----------------------------------------------------------------------------
    def open_session(self, session_id: str, user: str, expires: float, now: float) -> None:
        conn = self._connect()
        with _immediate(conn):
            conn.execute("DELETE FROM sessions WHERE expires < ?", (now,))
            conn.execute(
                "INSERT INTO sessions (id, user, expires) VALUES (?, ?, ?)",
                (session_id, user, expires),
            )

    def session_user(self, session_id: str, now: float) -> str | None:
        row = (
            self._connect()
            .execute("SELECT user FROM sessions WHERE id = ? AND expires >= ?", (session_id, now))
            .fetchone()
        )
        return str(row[0]) if row else None

    def close_session(self, session_id: str) -> None:
        self._connect().execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    # -- attempts -----------------------------------------------------------------------------
    def begin_attempt(self, client: str, now: float, limit: int, window: float) -> int | Refused:
        """Count a check for ``client`` before it runs: its row id, or :class:`Refused` when
        the client has had ``limit`` failed (or running) checks in the last ``window``
        seconds."""
        conn = self._connect()
        since = now - window
        with _immediate(conn):
            count, oldest = conn.execute(
                "SELECT count(*), min(at) FROM attempts WHERE address = ? AND at > ?",
                (client, since),
            ).fetchone()
            if count >= limit:
                return Refused(max(1, math.ceil(oldest + window - now)))
            conn.execute("DELETE FROM attempts WHERE at <= ?", (since,))
            cursor = conn.execute("INSERT INTO attempts (address, at) VALUES (?, ?)", (client, now))
            return int(cursor.lastrowid or 0)

    def succeeded(self, attempt: int) -> None:
        """A check that matched counts for nothing."""
        self._connect().execute("DELETE FROM attempts WHERE id = ?", (attempt,))


class _immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on an error): the count and the insert
    of :meth:`AuthState.begin_attempt` see no other writer in between."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        self.conn.execute("ROLLBACK" if kind is not None else "COMMIT")
