"""A replication test bench: the strict local MDR service, a real store, the notifier with a
local SMTP server, and one clock shared by the service, the harvester and the notifier."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Secret,
    Settings,
    SourceConfig,
    ValidationStep,
)
from aggregator.core.events import EventBus, HarvestEvent
from aggregator.demo.peers.mdr import MdrService
from aggregator.demo.peers.mdr_pages import MdrPage
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.smtp import SmtpPeer
from aggregator.jobs.notify import Notifier, attach, parse_notify
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.store.journal import JobRow
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"
USER = "apmdrsrv"
PASSWORD = "Mdr-s3cret-Pa55"
T0 = datetime(2026, 1, 12, tzinfo=UTC)
MDC_EVENTS = [
    "MDR_SERVICE_DOWN",
    "CMS_DOWN",
    "DB_DOWN",
    "RECV_INVALID_MD",
    "MD_VALIDATION_ERR",
    "MD_REPL_FAILED",
    "MDR_SRV_RECOVERED",
    "MD_REPL_RECOVERED",
    "MD_REPL_FAILURE_ESCLTN",
    "DOWN_TIME_ESCLTN",
]


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


class MdrBench:
    def __init__(
        self,
        tmp: Path,
        pages: Iterable[MdrPage],
        *,
        smtp: SmtpPeer | None = None,
        options: dict[str, Any] | None = None,
        password: str = PASSWORD,
        retries: int = 0,
        clock_skew: timedelta = timedelta(0),
    ) -> None:
        self.clock = Clock()
        self.service = MdrService({USER: PASSWORD}, pages, clock=self.clock, clock_skew=clock_skew)
        self.server = PeerServer(self.service)
        self.url = f"{self.server.url}mdr/services/MdrService"
        opts: dict[str, Any] = {
            "username": USER,
            "since": "2026-01-01T00:00:00Z",
            "chunk_minutes": 1440,
            "escalation_md_minutes": 60,
            "escalation_status_minutes": 30,
        }
        opts.update(options or {})
        self.source = SourceConfig(
            name="portal",
            type="mdr",
            url=self.url,
            format="mdr",
            validation=(ValidationStep("mdr-metadata"), ValidationStep("shacl")),
            options=opts,
            secrets={"password": Secret("MDR_PASSWORD", password)},
        )
        notify = (
            parse_notify(
                {
                    "log_file": "events.log",
                    "admin_email": "mdc-admin@aggregator.example",
                    "escalation_email": "mdc-head@aggregator.example",
                    "smtp": {"host": "127.0.0.1", "port": smtp.port, "timeout": 5},
                    "sites": {
                        "portal": {
                            "admin_email": "webmaster@portal.example.gov.in",
                            "escalation_email": "cio@portal.example.gov.in",
                        }
                    },
                    "rules": [{"events": MDC_EVENTS, "actions": ["email", "log_file"]}],
                },
                tmp,
                environ={},
            )
            if smtp is not None
            else parse_notify({}, tmp, environ={})
        )
        self.settings = Settings(
            config_path=None,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=retries, connect_timeout=2, timeout=10),
            harvest=HarvestSettings(workers=0, batch_size=50),
            sources={"portal": self.source},
            notify=notify,
        )
        self.store = RecordStore(self.settings.store_path, BASE)
        self.bus = EventBus()
        self.heard: list[HarvestEvent] = []
        self.notifier: Notifier = attach(self.settings, self.bus, clock=self.clock)
        self.bus.subscribe(self.heard.append)
        self.sleeps: list[float] = []

    def http(self) -> HttpClient:
        return HttpClient(self.settings.http, sleep=self.sleeps.append)

    def run(self, **kw: Any) -> JobRow:
        return run_source(
            self.settings, self.store, "portal", http=self.http(), events=self.bus, **kw
        )

    def kinds(self) -> list[str]:
        return [getattr(e, "kind", type(e).__name__) for e in self.heard]

    def operations(self) -> list[str]:
        return [c[0] for c in self.service.calls]

    def status(self, local_id: str) -> str | None:
        row = self.store.record("portal", local_id)
        return row.status if row is not None else None

    def close(self) -> None:
        self.notifier.detach()
        self.store.close()
        self.server.stop()
