"""Who may change things: the admin's password or API token (kept as scrypt hashes), a signed
session cookie after logging in, and CSRF tokens on every form that changes something.

- A hash is ``scrypt$N$r$p$salt$digest`` (hex salt and digest), made by :func:`hash_secret`
  (``aggregator dashboard-hash``) and checked in constant time by :func:`verify_secret`.
  Checking costs one scrypt (16 MiB, dear on purpose: docs/benchmarks.md#dashboard): the web
  layer runs it off the event loop, a few
  at a time, and only for addresses under their limit of failures (:mod:`.attempts`).
- A session cookie is ``id|expiry|hmac`` signed with a key kept in the store folder
  (``dashboard.key``, created once with O_EXCL so every serving process shares it); the id
  must also be open in :mod:`.auth_state`, which logging out closes (a copied cookie then
  opens nothing).
- A CSRF token is an HMAC of the session id: a page of another site can make the browser
  send the cookie (SameSite=Strict stops most of that) but cannot read the token. The login
  form, before any session, carries an HMAC of a random nonce kept in a cookie of its own
  (a signed double submit), so another site cannot log a browser in under its own account.
- Scripts send ``Authorization: Bearer <token>`` instead (no cookie, so no CSRF token needed).

Every comparison of something a client sent is in constant time, and a value that is not
ASCII simply does not match (``hmac.compare_digest`` raises on non-ASCII text).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from aggregator.core.errors import ConfigError

SESSION_COOKIE = "agg_session"
LOGIN_COOKIE = "agg_login"  # the login form's nonce (login CSRF)
SESSION_TTL = 8 * 3600  # seconds
_N, _R, _P = (
    2**14,
    8,
    1,
)  # scrypt cost: 128 * N * r = 16 MiB per check (docs/benchmarks.md#dashboard)
_HEX_ID = re.compile(r"[0-9a-f]{32}")


def hash_secret(secret: str, *, salt: bytes | None = None) -> str:
    if not secret:
        raise ConfigError("an empty password or token cannot be hashed")
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def verify_secret(secret: str, stored: str) -> bool:
    """True when ``secret`` matches the stored hash; a malformed hash matches nothing."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = bytes.fromhex(digest)
        got = hashlib.scrypt(
            secret.encode("utf-8", "surrogatepass"),
            salt=bytes.fromhex(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
            maxmem=256 * 1024 * 1024,
        )
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got, expected)


def same(given: str, expected: str) -> bool:
    """``given == expected`` in constant time; text that is not ASCII never matches."""
    return given.isascii() and expected.isascii() and hmac.compare_digest(given, expected)


def check_hash_setting(value: str, name: str) -> None:
    if value and (value.count("$") != 5 or not value.startswith("scrypt$")):
        raise ConfigError(f"[serve] {name}: not a hash made by `aggregator dashboard-hash`")


def load_key(folder: Path) -> bytes:
    """The signing key shared by every serving process of this store (made on first use)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dashboard.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    for _ in range(50):  # another process may be writing it this instant
        text = path.read_text().strip()
        if len(text) == 64:
            return bytes.fromhex(text)
        time.sleep(0.01)
    raise ConfigError(f"{path}: not a dashboard key (delete it to make a new one)")


def new_id() -> str:
    """A session id or login nonce: 128 random bits in hex."""
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class SessionCookie:
    id: str
    expiry: int


@dataclass(frozen=True, slots=True)
class Auth:
    key: bytes
    user: str
    password_hash: str
    token_hash: str

    @property
    def enabled(self) -> bool:
        return bool(self.password_hash or self.token_hash)

    def _sign(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    # -- secrets (slow: call off the event loop) ----------------------------------------------
    def password_ok(self, user: str, password: str) -> bool:
        """The right user and password. The same work whichever is wrong: the password is
        always checked against the configured hash, the user name compared in constant
        time, so the time taken tells nothing about which user names exist."""
        if not self.password_hash:
            return False
        password_right = verify_secret(password, self.password_hash)
        user_right = hmac.compare_digest(
            user.encode("utf-8", "surrogatepass"), self.user.encode("utf-8", "surrogatepass")
        )
        return password_right and user_right

    def token_ok(self, token: str) -> bool:
        return bool(self.token_hash) and verify_secret(token, self.token_hash)

    # -- sessions -----------------------------------------------------------------------------
    def session_cookie(self, session_id: str, expiry: int) -> str:
        body = f"{session_id}|{expiry}"
        return f"{body}|{self._sign(body)}"

    def read_session_cookie(
        self, cookie: str | None, now: float | None = None
    ) -> SessionCookie | None:
        """The session a cookie names when it is ours, well formed and not expired (whether
        it is still open is for :mod:`.auth_state` to say)."""
        if not cookie or not self.password_hash:
            return None
        body, _, sig = cookie.rpartition("|")
        session_id, _, expiry = body.partition("|")
        if not same(sig, self._sign(body)) or not _HEX_ID.fullmatch(session_id):
            return None
        try:
            ends = int(expiry)
        except ValueError:
            return None
        if ends < (now or time.time()):
            return None
        return SessionCookie(session_id, ends)

    def csrf_token(self, session_id: str) -> str:
        return self._sign("csrf|" + session_id)

    def csrf_ok(self, session_id: str, token: str | None) -> bool:
        return bool(token) and same(token or "", self.csrf_token(session_id))

    # -- the login form (before any session) --------------------------------------------------
    @staticmethod
    def login_nonce(cookie: str | None) -> str | None:
        """The login form's nonce from its cookie, when it is one of ours in shape."""
        return cookie if cookie and _HEX_ID.fullmatch(cookie) else None

    def login_csrf_token(self, nonce: str) -> str:
        return self._sign("login|" + nonce)

    def login_csrf_ok(self, cookie: str | None, token: str | None) -> bool:
        nonce = self.login_nonce(cookie)
        return nonce is not None and bool(token) and same(token or "", self.login_csrf_token(nonce))


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None: no such header)."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
