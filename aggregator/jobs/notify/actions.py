"""The actions a rule runs for an event: log to a file, to the console, to syslog, e-mail.

Each action takes the event and returns nothing; a failing action is logged (without
secrets) and does not keep the others from running.
"""

from __future__ import annotations

import logging
import logging.handlers
import socket
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from aggregator.config.notify import NotifySettings
from aggregator.core.events import HarvestEvent
from aggregator.core.notices import body_lines, describe, kind_of, level_of
from aggregator.jobs.notify.mailer import Mailer

log = logging.getLogger("aggregator.notify")  # the name operators filter on

SYSLOG_LEVELS = {
    "info": logging.INFO,
    "recovery": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "escalation": logging.CRITICAL,
}


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def line(event: HarvestEvent) -> str:
    """The one line the log actions write: ``time LEVEL KIND source=... : message``."""
    return f"{stamp(event.at)} {level_of(event).upper()} {describe(event)}"


class FileLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, event: HarvestEvent) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line(event) + "\n")


def console(event: HarvestEvent) -> None:
    print(line(event), file=sys.stderr, flush=True)


class Syslog:
    """RFC 3164 messages to a local socket (``/dev/log``) or ``host:port`` over UDP."""

    def __init__(self, address: str) -> None:
        target: str | tuple[str, int]
        host, sep, port = address.rpartition(":")
        if sep and port.isdigit() and not address.startswith("/"):
            target = (host, int(port))
        else:
            target = address or "/dev/log"
        self.handler = logging.handlers.SysLogHandler(
            address=target,
            facility=logging.handlers.SysLogHandler.LOG_DAEMON,
            socktype=socket.SOCK_DGRAM,
        )
        self.handler.ident = "ld-aggregator: "

    def __call__(self, event: HarvestEvent) -> None:
        record = logging.LogRecord(
            "aggregator.jobs.notify",
            SYSLOG_LEVELS[level_of(event)],
            "",
            0,
            describe(event),
            (),
            None,
        )
        self.handler.emit(record)

    def close(self) -> None:
        self.handler.close()


def recipients(settings: NotifySettings, event: HarvestEvent, to: Sequence[str]) -> list[str]:
    """Resolve roles (admin, escalation, site_admin, site_escalation) and addresses; by
    default an escalation goes to the escalation addresses, anything else to the admins."""
    roles = to or (
        ("site_escalation", "escalation")
        if level_of(event) == "escalation"
        else ("site_admin", "admin")
    )
    site = settings.site(event.source)
    out: list[str] = []
    for role in roles:
        match role:
            case "admin":
                found: Sequence[str] = settings.operators.admin
            case "escalation":
                found = settings.operators.escalation
            case "site_admin":
                found = site.admin
            case "site_escalation":
                found = site.escalation
            case address:
                found = (address,)
        out.extend(a for a in found if a not in out)
    return out


def subject(event: HarvestEvent) -> str:
    return f"[ld-aggregator] {kind_of(event)}: {event.source}"


def email(mailer: Mailer, settings: NotifySettings, event: HarvestEvent, to: Sequence[str]) -> None:
    addresses = recipients(settings, event, to)
    if not addresses:
        log.warning("%s (%s): no e-mail recipients configured", kind_of(event), event.source)
        return
    mailer.send(addresses, subject(event), "\n".join(body_lines(event)) + "\n")
