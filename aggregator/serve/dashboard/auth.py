"""Who may change things: the admin's password or API token (kept as scrypt hashes), a signed
session cookie after logging in, and CSRF tokens on every admin form.

- A hash is ``scrypt$N$r$p$salt$digest`` (hex salt and digest), made by :func:`hash_secret`
  (``aggregator dashboard-hash``) and checked in constant time by :func:`verify_secret`.
- A session is ``user|expiry|hmac`` signed with a key kept in the store folder
  (``dashboard.key``, created once with O_EXCL so every serving process shares it).
- A CSRF token is an HMAC of the session cookie: a page of another site can make the browser
  send the cookie (SameSite=Strict stops most of that) but cannot read the token.
- Scripts send ``Authorization: Bearer <token>`` instead (no cookie, so no CSRF token needed).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from aggregator.errors import ConfigError

SESSION_COOKIE = "agg_session"
SESSION_TTL = 8 * 3600  # seconds
_N, _R, _P = 2**14, 8, 1  # scrypt cost: ~16 MiB, ~50 ms per check


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
            secret.encode(),
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

    def login(self, user: str, password: str, now: float | None = None) -> str | None:
        """A session cookie value for the right user and password, else None."""
        if not self.password_hash or not hmac.compare_digest(user.encode(), self.user.encode()):
            verify_secret(password, hash_secret("x", salt=b"0" * 16))  # same time either way
            return None
        if not verify_secret(password, self.password_hash):
            return None
        expiry = int((now or time.time()) + SESSION_TTL)
        body = f"{user}|{expiry}"
        return f"{body}|{self._sign(body)}"

    def session_user(self, cookie: str | None, now: float | None = None) -> str | None:
        if not cookie or not self.password_hash:
            return None
        body, _, sig = cookie.rpartition("|")
        user, _, expiry = body.partition("|")
        if not hmac.compare_digest(sig, self._sign(body)):
            return None
        try:
            if int(expiry) < (now or time.time()):
                return None
        except ValueError:
            return None
        return user if user == self.user else None

    def bearer_ok(self, header: str | None) -> bool:
        if not header or not self.token_hash:
            return False
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and verify_secret(token.strip(), self.token_hash)

    def csrf_token(self, cookie: str) -> str:
        return self._sign("csrf|" + cookie)

    def csrf_ok(self, cookie: str | None, token: str | None) -> bool:
        if not cookie or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(cookie))
