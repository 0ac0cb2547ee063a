"""Sending notification e-mail over SMTP (the standard library's ``smtplib``).

The password comes from the environment variable named in ``[notify.smtp] password_env``
(a :class:`~aggregator.config.Secret`); it is handed to ``smtplib`` only and never appears in
a log line or an error message.
"""

from __future__ import annotations

import logging
import smtplib
import ssl
from collections.abc import Sequence
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from aggregator.config.notify import SmtpSettings
from aggregator.core.errors import AggregatorError

log = logging.getLogger("aggregator.notify")  # the name operators filter on


class MailError(AggregatorError):
    code = "mailError"


class Mailer:
    """Sends one message at a time through the configured SMTP server."""

    def __init__(self, settings: SmtpSettings) -> None:
        self.settings = settings

    def compose(self, to: Sequence[str], subject: str, body: str) -> EmailMessage:
        msg = EmailMessage()
        msg["From"] = self.settings.sender
        msg["To"] = ", ".join(to)
        msg["Subject"] = subject
        msg["Date"] = format_datetime(datetime.now(UTC))
        msg["Message-ID"] = make_msgid(domain=self.settings.sender.rpartition("@")[2])
        msg.set_content(body)
        return msg

    def send(self, to: Sequence[str], subject: str, body: str) -> None:
        """Send, or raise :class:`MailError` (saying what failed, without the password)."""
        if not to:
            return
        s = self.settings
        msg = self.compose(to, subject, body)
        try:
            if s.security == "ssl":
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    s.host, s.port, timeout=s.timeout, context=ssl.create_default_context()
                )
            else:
                smtp = smtplib.SMTP(s.host, s.port, timeout=s.timeout)
            with smtp:
                if s.security == "starttls":
                    smtp.starttls(context=ssl.create_default_context())
                if s.username:
                    password = s.password.reveal() if s.password is not None else ""
                    smtp.login(s.username, password)
                smtp.send_message(msg)
        except smtplib.SMTPAuthenticationError as err:
            raise MailError(
                f"SMTP server {s.host}:{s.port} refused the login of {s.username!r}"
                f" ({err.smtp_code})"
            ) from None
        except smtplib.SMTPException as err:
            raise MailError(
                f"SMTP server {s.host}:{s.port}: {type(err).__name__}: {_first_line(err)}"
            ) from None
        except OSError as err:
            raise MailError(
                f"cannot reach SMTP server {s.host}:{s.port}: {err.strerror or err}"
            ) from None
        log.info("mail %r sent to %s", subject, ", ".join(to))


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
