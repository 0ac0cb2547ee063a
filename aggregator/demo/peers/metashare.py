"""A strict local META-SHARE node speaking harvesting protocol 1.0 (tests and the demo).

What it enforces, as a Django-based node does:

- ``GET /login/`` sets a fresh ``csrftoken`` cookie and shows the login form;
- ``POST /login/`` needs the ``csrftoken`` cookie *and* an equal ``csrfmiddlewaretoken`` field
  (else 403, Django's CSRF failure), ``this_is_the_login_form=1``, and known credentials:
  then it sets ``sessionid`` and shows a page with ``Logout``; a wrong password gets the
  login form again with status 200 (``wrong_password_status=403`` answers as the protocol
  text says instead);
- ``/sync/`` and ``/sync/<id>/metadata/`` need a session of a synchronisation user (403);
  ``/sync/`` needs ``sync_protocol=1.0`` (else 501; ``protocol_supported=False`` answers
  501 to everything a harvester asks); an unknown storage id is 404;
- the inventory is a ZIP holding exactly ``inventory.json`` (storage id -> MD5 of the LR);
  an LR is a ZIP of ``metadata.xml`` (ASCII, non-ASCII characters as character references,
  as real nodes serialise it) then ``storage-global.json`` (eight members, sorted keys, no
  optional whitespace).

LRs change (:meth:`MetaShareNode.put` again: the revision goes up), get deleted
(:meth:`delete`: still listed, ``deleted`` true), disappear (:meth:`remove`) and come back
unchanged (:meth:`restore`). A test can make one LR's answer hostile with :meth:`serve_raw`
(a zip bomb, a traversal name, a body whose checksum does not match).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import secrets
import threading
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from lxml import etree

from aggregator.demo.peers.server import respond

MS = "http://www.ilsp.gr/META-XMLSchema"
SAMPLES = ("corpus", "lexicon", "grammar", "tool-service")
_LR_PATH = re.compile(r"^/sync/([0-9a-f]{64})/metadata/$")
_LOGIN_FORM = (
    b"<!DOCTYPE html><html><head><title>Log in | META-SHARE</title></head><body>"
    b'<form action="/login/" method="post">'
    b'<input type="hidden" name="csrfmiddlewaretoken" value="%s">'
    b'<input type="hidden" name="this_is_the_login_form" value="1">'
    b'<input type="text" name="username"><input type="password" name="password">'
    b'<input type="submit" value="Log in"></form>%s</body></html>'
)


def storage_id(n: int) -> str:
    """A deterministic 64-hex storage id (a version 1 and a version 4 UUID, as hex)."""
    digest = hashlib.sha256(f"lr-{n}".encode()).hexdigest()
    v1 = digest[:12] + "1" + digest[13:32]
    v4 = digest[32:44] + "4" + digest[45:48] + "8" + digest[49:64]
    return v1 + v4


def ascii_xml(xml: bytes) -> bytes:
    """The description as a node serialises ``metadata.xml``: ASCII, character references."""
    root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, no_network=True))
    return etree.tostring(root, encoding="ascii", xml_declaration=True)


def sample_xml(name: str) -> bytes:
    """A bundled sample description (``corpus``, ``lexicon``, ``grammar``, ``tool-service``)."""
    path = resources.files("aggregator.demo.peers") / "data" / "meta-share" / f"{name}.xml"
    return path.read_bytes()


def variant(xml: bytes, n: int) -> bytes:
    """Sample ``xml`` made into LR number ``n``: its names and identifier carry the number."""
    root = etree.fromstring(xml)
    for el in root.iter(f"{{{MS}}}resourceName"):
        el.text = f"{el.text} ({n})"
    for el in root.iter(f"{{{MS}}}identifier"):
        el.text = f"{el.text}-{n}"
    return etree.tostring(root, encoding="UTF-8", xml_declaration=True)


def zip_of(members: Iterable[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()


@dataclass
class NodeLr:
    """One LR as the node stores it."""

    metadata: bytes  # metadata.xml as served (ASCII)
    created: datetime
    modified: datetime
    revision: int = 1
    deleted: bool = False
    body: bytes = b""  # the resource ZIP, built on change
    checksum: str = ""


class MetaShareNode:
    """The node as a WSGI app; LRs, users and behaviour can change between requests."""

    def __init__(
        self,
        *,
        users: dict[str, str] | None = None,
        sync_users: Iterable[str] | None = None,
        wrong_password_status: int = 200,
        metashare_version: str = "3.0.3",
    ) -> None:
        self.users = dict(users or {"syncuser": "sync-secret"})
        self.sync_users = set(self.users if sync_users is None else sync_users)
        self.wrong_password_status = wrong_password_status
        self.metashare_version = metashare_version
        self.protocol_supported = True
        self.source_url = "http://127.0.0.1"  # set to the server's URL once it runs
        self._lrs: dict[str, NodeLr] = {}
        self._raw: dict[str, bytes] = {}
        self._removed: dict[str, NodeLr] = {}
        self._inventory: bytes | None = None
        self._csrf: set[str] = set()
        self._sessions: dict[str, str] = {}
        self._lock = threading.Lock()
        self._clock = datetime(2012, 5, 21, 17, 0, 23, tzinfo=UTC)
        self.requests: dict[str, int] = {}  # path kind -> count ("login", "inventory", "lr")

    # -- the LR storage ---------------------------------------------------------------------
    def _tick(self) -> datetime:
        self._clock += timedelta(seconds=1)
        return self._clock

    def put(self, lr_id: str, xml: bytes) -> None:
        """Add an LR, or change it (a new revision)."""
        with self._lock:
            now = self._tick()
            old = self._lrs.get(lr_id)
            lr = NodeLr(ascii_xml(xml), old.created if old else now, now)
            if old is not None:
                lr.revision = old.revision + 1
            self._lrs[lr_id] = lr
            self._build(lr_id, lr)

    def delete(self, lr_id: str) -> None:
        """Mark an LR deleted (it stays in the inventory, ``deleted`` true)."""
        with self._lock:
            lr = self._lrs[lr_id]
            lr.deleted, lr.revision, lr.modified = True, lr.revision + 1, self._tick()
            self._build(lr_id, lr)

    def remove(self, lr_id: str) -> None:
        """The LR disappears from the node altogether."""
        with self._lock:
            self._removed[lr_id] = self._lrs.pop(lr_id)
            self._raw.pop(lr_id, None)
            self._inventory = None

    def restore(self, lr_id: str) -> None:
        """A removed LR comes back exactly as it was (same revision, same checksum)."""
        with self._lock:
            self._lrs[lr_id] = self._removed.pop(lr_id)
            self._inventory = None

    def serve_raw(self, lr_id: str, body: bytes | None) -> None:
        """Answer the LR's request with ``body`` (hostile bodies); None: normal again."""
        with self._lock:
            if body is None:
                self._raw.pop(lr_id, None)
            else:
                self._raw[lr_id] = body

    def upgrade(self, metashare_version: str) -> None:
        """The node's software is upgraded: every ``storage-global.json`` names the new version,
        so every checksum changes while no description does."""
        with self._lock:
            self.metashare_version = metashare_version
            for lr_id, lr in self._lrs.items():
                self._build(lr_id, lr)

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._lrs)

    def checksum(self, lr_id: str) -> str:
        with self._lock:
            return self._lrs[lr_id].checksum

    def storage_global(self, lr_id: str, lr: NodeLr) -> bytes:
        fields = {
            "created": lr.created.strftime("%Y-%m-%d %H:%M:%S"),
            "deleted": lr.deleted,
            "identifier": lr_id,
            "metashare_version": self.metashare_version,
            "modified": lr.modified.strftime("%Y-%m-%d %H:%M:%S"),
            "publication_status": "p",
            "revision": lr.revision,
            "source_url": self.source_url,
        }
        return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode("utf-8")

    def _build(self, lr_id: str, lr: NodeLr) -> None:
        storage = self.storage_global(lr_id, lr)
        lr.checksum = hashlib.md5(lr.metadata + storage, usedforsecurity=False).hexdigest()
        lr.body = zip_of([("metadata.xml", lr.metadata), ("storage-global.json", storage)])
        self._inventory = None

    def _inventory_zip(self) -> bytes:
        with self._lock:
            if self._inventory is None:
                listing = {i: lr.checksum for i, lr in sorted(self._lrs.items())}
                data = json.dumps(listing, separators=(",", ":")).encode("utf-8")
                self._inventory = zip_of([("inventory.json", data)])
            return self._inventory

    # -- HTTP -------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        cookies = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        jar = {k: m.value for k, m in cookies.items()}
        if path == "/login/":
            self._count("login")
            if method == "GET":
                return self._login_form(start_response, b"")
            if method == "POST":
                return self._login(environ, jar, start_response)
            return respond(start_response, 405, b"method not allowed")
        if method != "GET":
            return respond(start_response, 405, b"method not allowed")
        user = self._sessions.get(jar.get("sessionid", ""))
        if path == "/sync/":
            self._count("inventory")
            if user is None or user not in self.sync_users:
                return respond(start_response, 403, b"Forbidden")
            query = parse_qs(environ.get("QUERY_STRING", ""))
            if not self.protocol_supported or query.get("sync_protocol") != ["1.0"]:
                return respond(start_response, 501, b"Not Implemented")
            return respond(
                start_response, 200, self._inventory_zip(), "application/zip",
                [("Sync-Protocol", "1.0"),
                 ("Content-Disposition", "attachment; filename=inventory.zip")],
            )  # fmt: skip
        match = _LR_PATH.match(path)
        if match:
            self._count("lr")
            if user is None or user not in self.sync_users:
                return respond(start_response, 403, b"Forbidden")
            if not self.protocol_supported:
                return respond(start_response, 501, b"Not Implemented")
            lr_id = match.group(1)
            with self._lock:
                body = self._raw.get(lr_id)
                lr = self._lrs.get(lr_id)
                if body is None and lr is not None:
                    body = lr.body
            if body is None:
                return respond(start_response, 404, b"Not Found")
            disposition = f"attachment; filename={lr_id}.zip"
            return respond(
                start_response, 200, body, "application/zip",
                [("Content-Disposition", disposition)],
            )  # fmt: skip
        return respond(start_response, 404, b"Not Found")

    def _count(self, kind: str) -> None:
        with self._lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1

    def _login_form(self, start_response: Callable[..., Any], message: bytes) -> list[bytes]:
        token = secrets.token_hex(16)
        with self._lock:
            self._csrf.add(token)
        body = _LOGIN_FORM % (token.encode(), message)
        return respond(
            start_response, 200, body, "text/html; charset=utf-8",
            [("Set-Cookie", f"csrftoken={token}; Path=/; SameSite=Lax")],
        )  # fmt: skip

    def _login(
        self, environ: dict[str, Any], jar: dict[str, str], start_response: Callable[..., Any]
    ) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        form = parse_qs(environ["wsgi.input"].read(length).decode("utf-8", errors="replace"))
        field = {k: v[0] for k, v in form.items() if v}
        cookie_token = jar.get("csrftoken", "")
        with self._lock:
            known = cookie_token in self._csrf
        if not known or field.get("csrfmiddlewaretoken") != cookie_token:
            return respond(start_response, 403, b"Forbidden (CSRF verification failed.)")
        user = field.get("username", "")
        if field.get("this_is_the_login_form") != "1" or self.users.get(user) != field.get(
            "password"
        ):
            if self.wrong_password_status != 200:
                return respond(start_response, self.wrong_password_status, b"Forbidden")
            error = b'<p class="errornote">Please enter a correct username and password.</p>'
            return self._login_form(start_response, error)
        session = secrets.token_hex(16)
        with self._lock:
            self._sessions[session] = user
        page = b"<html><body><p>Welcome, %s.</p><a href='/logout/'>Logout</a></body></html>"
        return respond(
            start_response, 200, page % user.encode(), "text/html; charset=utf-8",
            [("Set-Cookie", f"sessionid={session}; Path=/; HttpOnly; SameSite=Lax")],
        )  # fmt: skip


def bundled_node(count: int = 4) -> tuple[MetaShareNode, list[str]]:
    """A node with ``count`` LRs made from the four bundled samples (one of each resource
    type first, then numbered variants); returns the node and the storage ids in order."""
    node = MetaShareNode()
    samples = [sample_xml(name) for name in SAMPLES]
    ids = []
    for n in range(count):
        xml = samples[n % len(samples)]
        lr_id = storage_id(n)
        node.put(lr_id, xml if n < len(samples) else variant(xml, n))
        ids.append(lr_id)
    return node, ids
