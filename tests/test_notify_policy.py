"""Per-source notification policies on the notifier: real harvests of the OAI-PMH peer (and of
a closed port), mail received by a local SMTP server (aiosmtpd)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aggregator.config import load_settings
from aggregator.core.errors import ConfigError
from aggregator.core.events import EventBus
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.smtp import SmtpPeer
from aggregator.jobs.notify import attach
from aggregator.jobs.notify.wiring import flush_digests
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, smtp_port: int, sources: dict[str, tuple[str, str]]) -> Path:
    blocks = ""
    for name, (url, policy) in sources.items():
        digest = policy.endswith("+digest")
        blocks += (
            f'[sources.{name}]\ntype = "oai-pmh"\nurl = "{url}"\n'
            f'notify = "{policy.removesuffix("+digest")}"\n'
            f"notify_digest = {'true' if digest else 'false'}\n\n"
            f'[notify.sites.{name}]\nadmin_email = "{name}@portal.example"\n\n'
        )
    config = tmp_path / "aggregator.toml"
    config.write_text(
        '[store]\npath = "store"\nbase_iri = "http://127.0.0.1:8000/"\n\n'
        "[http]\nallow_private = true\nretries = 0\n\n[harvest]\nworkers = 0\n\n"
        '[notify]\nadmin_email = "ops@aggregator.example"\n\n'
        f'[notify.smtp]\nhost = "127.0.0.1"\nport = {smtp_port}\n\n{blocks}',
        encoding="utf-8",
    )
    return config


def test_each_source_is_reported_by_its_policy(tmp_path: Path) -> None:
    items = MemoryItems(
        OaiItem(generate_identifier(i), T0, metadata=generate_dataset(i)) for i in range(3)
    )
    down = f"http://127.0.0.1:{_closed_port()}/oai"
    with SmtpPeer() as smtp, PeerServer(OaiPmhPeer(items)) as server:
        up = f"{server.url}oai"
        config = _config(
            tmp_path,
            smtp.port,
            {
                "errs": (down, "on-error"),
                "quiet": (down, "never"),
                "every": (up, "always"),
                "changes": (up, "on-error-or-change"),
                "daily": (up, "always+digest"),
            },
        )
        settings = load_settings(config)
        bus = EventBus()
        attach(settings, bus)
        http = HttpClient(settings.http)

        def harvest(name: str) -> str:
            with RecordStore(settings.store_path, settings.base_iri) as store:
                return run_source(settings, store, name, http=http, events=bus).status

        assert harvest("errs") == "failed"
        assert harvest("quiet") == "failed"
        [failed] = smtp.wait_for(1)
        assert "errs" in failed["Subject"] and "JobFailed" in failed["Subject"]
        assert smtp.envelopes[0][1] == ["errs@portal.example", "ops@aggregator.example"]
        assert "could not connect to 127.0.0.1" in failed.get_content()

        assert harvest("every") == "succeeded"
        assert harvest("every") == "succeeded"  # nothing new: still told, "always"
        assert harvest("changes") == "succeeded"  # 3 added: a change
        assert harvest("changes") == "succeeded"  # nothing changed: no mail
        mails = smtp.wait_for(4)[1:]
        subjects = [m["Subject"] for m in mails]
        assert sum("every" in s and "JobFinished" in s for s in subjects) == 2, subjects
        [changed] = [m for m in mails if "SOURCE_CHANGED" in m["Subject"]]
        assert "changes" in changed["Subject"] and "3 added" in changed.get_content()
        assert smtp.envelopes[3][1] == ["changes@portal.example", "ops@aggregator.example"]

        # the source that failed comes back: a recovery message
        config.write_text(config.read_text().replace(down, up, 1), encoding="utf-8")
        settings = load_settings(config)
        bus = EventBus()
        attach(settings, bus)

        def harvest_again(name: str) -> str:
            with RecordStore(settings.store_path, settings.base_iri) as store:
                return run_source(settings, store, name, http=http, events=bus).status

        assert harvest_again("errs") == "succeeded"
        recovered = smtp.wait_for(5)[4]
        assert "errs" in recovered["Subject"] and "JobRecovered" in recovered["Subject"]

        # the digest source: no mail during the day, one mail for the day after it
        assert harvest_again("daily") == "succeeded"
        assert harvest_again("daily") == "succeeded"
        assert flush_digests(lambda: datetime.now(UTC)) == 0
        assert len(smtp.messages) == 5
        assert flush_digests(lambda: datetime.now(UTC) + timedelta(days=1)) == 1
        digest = smtp.wait_for(6)[5]
        assert "daily: 2 event(s) on" in digest["Subject"]
        body = digest.get_content()
        assert body.count("JobFinished source=daily") == 2
        assert smtp.envelopes[5][1] == ["daily@portal.example", "ops@aggregator.example"]
        assert flush_digests(lambda: datetime.now(UTC) + timedelta(days=1)) == 0  # sent once
        assert len(smtp.messages) == 6


def test_a_policy_must_be_known(tmp_path: Path) -> None:
    config = _config(tmp_path, 25, {"x": ("http://127.0.0.1:9/oai", "sometimes")})
    with pytest.raises(ConfigError, match="notify must be one of never, on-error, always"):
        load_settings(config)
