"""Resumption tokens: opaque, signed, self-contained keyset positions.

A token is ``<payload>.<signature>``, both base64url without padding. The payload is a JSON
array holding the whole query (verb, metadataPrefix, set, from, until), the position after
the last record sent (its ``modified`` and row id: paging is keyset paging on that pair,
never OFFSET), the cursor, the completeListSize counted on the first page, and the expiry
(Unix seconds). The signature is HMAC-SHA256 of the payload with the provider's key.

So the server keeps no state per listing; a token cannot be altered, moved to another query
or verb, or replayed after it expired without being refused (``badResumptionToken``); and
the same token always selects the same page. Expiry is rounded up to the minute, so re-issuing
a token within a minute gives back the very same next token.

The key comes from the environment variable named by ``serve.oai_token_key_env`` (read once,
at start-up) or else is generated once and kept in the store's ``meta`` table, so tokens stay
valid across restarts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
from dataclasses import dataclass
from typing import Any

from aggregator.core.errors import ConfigError
from aggregator.store.names import StoreNames

TOKEN_VERSION = 1
MAX_TOKEN_LENGTH = 2048
META_KEY = "oai_token_key"


class TokenError(Exception):
    """A token that is malformed, tampered with, expired or signed with another key."""


@dataclass(frozen=True, slots=True)
class TokenState:
    verb: str
    prefix: str
    set_spec: str | None
    from_: str | None
    until: str | None
    after_modified: str
    after_id: int
    cursor: int
    total: int
    expires: int  # Unix seconds


def load_key(store: StoreNames, env_name: str, environ: dict[str, str] | None = None) -> bytes:
    """The HMAC key: from ``env_name`` when set, else the one kept in the store (made once).

    Call at start-up. Keeping a new key is one small SQLite transaction of its own, so it
    needs no writer lock: ``serve`` makes it even while a harvest writes the store.
    """
    if env_name:
        env = os.environ if environ is None else environ
        value = env.get(env_name, "")
        if not value:
            raise ConfigError(
                f"serve.oai_token_key_env names {env_name!r}, but that variable is not set"
            )
        return value.encode("utf-8")
    conn = sqlite3.connect(store.path / "state.sqlite3", isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
            (META_KEY, secrets.token_hex(32)),
        )
        kept = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0]
    finally:
        conn.close()
    return bytes.fromhex(str(kept))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest()
        return _b64(mac)

    def encode(self, state: TokenState) -> str:
        body: list[Any] = [
            TOKEN_VERSION,
            state.verb,
            state.prefix,
            state.set_spec,
            state.from_,
            state.until,
            state.after_modified,
            state.after_id,
            state.cursor,
            state.total,
            state.expires,
        ]
        payload = _b64(json.dumps(body, separators=(",", ":")).encode("utf-8"))
        return f"{payload}.{self._sign(payload)}"

    def decode(self, token: str, now: float) -> TokenState:
        if len(token) > MAX_TOKEN_LENGTH or token.count(".") != 1:
            raise TokenError("malformed token")
        payload, signature = token.split(".")
        try:
            expected = self._sign(payload)
        except UnicodeEncodeError as err:
            raise TokenError("malformed token") from err
        if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8")):
            raise TokenError("bad signature")
        try:
            body = json.loads(_unb64(payload))
        except (ValueError, binascii.Error) as err:
            raise TokenError("malformed token") from err
        state = _state(body)
        if state.expires < now:
            raise TokenError("expired")
        return state


def _state(body: Any) -> TokenState:
    """Check the shape of a signed payload (a key shared with an older version, say)."""
    if not isinstance(body, list) or len(body) != 11 or body[0] != TOKEN_VERSION:
        raise TokenError("unknown token version")
    _, verb, prefix, set_spec, from_, until, modified, after_id, cursor, total, expires = body
    strings = (verb, prefix, modified)
    optional = (set_spec, from_, until)
    numbers = (after_id, cursor, total, expires)
    if (
        not all(isinstance(v, str) for v in strings)
        or not all(v is None or isinstance(v, str) for v in optional)
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in numbers)
    ):
        raise TokenError("malformed token")
    return TokenState(
        verb, prefix, set_spec, from_, until, modified, after_id, cursor, total, expires
    )
