"""A local SMTP server (aiosmtpd) that keeps what it receives: for notification tests.

aiosmtpd is a development dependency: this module imports it when a server starts. With
``users`` the server requires ``AUTH LOGIN/PLAIN`` with one of those user/password pairs
(offered on the plain connection: a loopback test server has no certificate; MAIL FROM
is refused before a login)::

    with SmtpPeer(users={"agg": "s3cret"}) as smtp:
        ...                               # send to 127.0.0.1:smtp.port
        smtp.wait_for(2)                  # the first two messages
        smtp.messages[0]["Subject"]
"""

from __future__ import annotations

import email
import email.policy
import socket
import threading
import time
from collections.abc import Mapping
from email.message import EmailMessage
from types import TracebackType
from typing import Any


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class SmtpPeer:
    def __init__(self, host: str = "127.0.0.1", users: Mapping[str, str] | None = None) -> None:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        self.host = host
        self.users = dict(users or {})
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []  # (MAIL FROM, RCPT TO)
        self.logins: list[str] = []
        self.failed_logins = 0
        self._cond = threading.Condition()
        peer = self

        class Handler:
            async def handle_MAIL(
                self, server: Any, session: Any, envelope: Any, address: str, options: Any
            ) -> str:
                if peer.users and not session.authenticated:
                    return "530 5.7.0 Authentication required"
                envelope.mail_from = address
                envelope.mail_options.extend(options)
                return "250 OK"

            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                with peer._cond:
                    assert isinstance(message, EmailMessage)
                    peer.messages.append(message)
                    peer.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
                    peer._cond.notify_all()
                return "250 OK"

        def authenticate(
            server: Any, session: Any, envelope: Any, mechanism: str, data: Any
        ) -> AuthResult:
            if isinstance(data, LoginPassword):
                user, password = data.login.decode(), data.password.decode()
                if self.users.get(user) == password:
                    self.logins.append(user)
                    return AuthResult(success=True)
            self.failed_logins += 1
            return AuthResult(success=False, handled=False)

        kwargs: dict[str, Any] = {}
        if self.users:
            # AUTH is offered on the plain connection (a loopback server has no certificate)
            # and MAIL FROM refused before it (aiosmtpd's auth_required warns without TLS)
            kwargs = {"authenticator": authenticate, "auth_require_tls": False}
        self.port = _free_port(host)
        self._controller = Controller(Handler(), hostname=host, port=self.port, **kwargs)
        self._controller.start()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[EmailMessage]:
        """The first ``count`` messages, waiting for them to arrive."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.messages) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.messages)} of {count} messages arrived")
                self._cond.wait(left)
            return list(self.messages[:count])

    def stop(self) -> None:
        self._controller.stop()

    def __enter__(self) -> SmtpPeer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
