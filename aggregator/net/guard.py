"""The SSRF guard of :mod:`aggregator.net.client`: refuse non-http(s) schemes and hosts that resolve
to non-public addresses (private, loopback, link-local, multicast, reserved, unspecified,
CGNAT; IPv4-mapped, 6to4 and NAT64 IPv6 forms unwrapped first) unless private targets are
allowed. The check is repeated when the socket is opened, and the socket connects to the very
address that was checked (:class:`GuardedAdapter`), so DNS rebinding between check and connect
does not get through.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.adapters
import urllib3.exceptions
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.connection import create_connection

from aggregator.core.errors import BlockedAddressError, TransportError

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
DEFAULT_PORTS = {"http": 80, "https": 443}


def is_public_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for globally routable unicast addresses; IPv4 embedded in IPv6 is checked too."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return is_public_address(addr.ipv4_mapped)
        if addr in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
        if addr.sixtofour is not None and not is_public_address(addr.sixtofour):
            return False
        if addr.teredo is not None:
            return False
    return addr.is_global and not addr.is_multicast and not addr.is_unspecified


@dataclass(frozen=True, slots=True)
class AddressGuard:
    """The SSRF policy of one client: the scheme rule, the address rule, trusted exceptions.

    ``trusted_hosts`` holds ``host:port`` strings (host lower-case, IPv6 without brackets)
    exempt from the address rule, e.g. one intranet catalogue; redirects elsewhere are still
    checked.
    """

    allow_private: bool = False
    trusted_hosts: frozenset[str] = field(default_factory=frozenset)

    def exempt(self, host: str, port: int) -> bool:
        return self.allow_private or f"{host.lower()}:{port}" in self.trusted_hosts

    def check_url(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            host = parts.hostname
            port = parts.port
        except ValueError as err:
            raise TransportError(f"invalid URL {url!r}: {err}", url=url) from err
        if parts.scheme not in ("http", "https"):
            raise BlockedAddressError(f"scheme {parts.scheme!r} is not allowed", url=url)
        if not host:
            raise BlockedAddressError("URL has no host", url=url)
        port = port or DEFAULT_PORTS[parts.scheme]
        if self.exempt(host, port):
            return
        for addr in self.resolve(host, port, url):
            self.check_ip(host, addr, url)

    def resolve(self, host: str, port: int, url: str | None = None) -> list[str]:
        try:
            infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as err:
            reason = getattr(err, "strerror", None) or str(err)
            raise TransportError(
                f"cannot resolve {host}: the host name could not be resolved ({reason})", url=url
            ) from err
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def check_ip(self, host: str, ip: str, url: str | None = None) -> None:
        try:
            addr = ipaddress.ip_address(ip.split("%", 1)[0])
        except ValueError:
            addr = None
        if addr is None or not is_public_address(addr):
            raise BlockedAddressError(
                f"{host} resolves to {ip}, a non-public address (SSRF guard)", url=url
            )


def _guarded_connect(conn: HTTPConnection, guard: AddressGuard) -> socket.socket:
    """Resolve, check every address, then connect to a checked address (no second lookup)."""
    host = conn._dns_host.strip("[]")
    port = conn.port or 80
    addresses = guard.resolve(host, port)
    if not guard.exempt(host, port):
        for ip in addresses:
            guard.check_ip(host, ip)
    err: Exception | None = None
    for ip in addresses:
        try:
            return create_connection(
                (ip, port),
                conn.timeout,
                source_address=conn.source_address,
                socket_options=conn.socket_options,
            )
        except TimeoutError as e:
            err = urllib3.exceptions.ConnectTimeoutError(
                conn, f"Connection to {host} timed out. (connect timeout={conn.timeout})"
            )
            err.__cause__ = e
        except OSError as e:
            err = urllib3.exceptions.NewConnectionError(
                conn, f"Failed to establish a new connection: {e}"
            )
            err.__cause__ = e
    raise err or urllib3.exceptions.NewConnectionError(conn, f"{host} has no address")


def _guarded_pool_classes(guard: AddressGuard) -> dict[str, type[HTTPConnectionPool]]:
    class GuardedHTTPConnection(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            return _guarded_connect(self, guard)

    class GuardedHTTPSConnection(HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            return _guarded_connect(self, guard)

    class GuardedHTTPConnectionPool(HTTPConnectionPool):
        ConnectionCls = GuardedHTTPConnection

    class GuardedHTTPSConnectionPool(HTTPSConnectionPool):
        ConnectionCls = GuardedHTTPSConnection

    return {"http": GuardedHTTPConnectionPool, "https": GuardedHTTPSConnectionPool}


class GuardedAdapter(requests.adapters.HTTPAdapter):
    """An adapter whose sockets connect only to addresses the guard has just checked."""

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard
        super().__init__()

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = _guarded_pool_classes(self._guard)
