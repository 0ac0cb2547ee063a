"""Notifications: rules, actions (file, console, syslog over UDP, e-mail through a real local
SMTP server with a login) and conditions that escalate and recover, with an injected clock;
driven by real harvests of the OAI-PMH peer and by Notices."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aggregator.config import HarvestSettings, HttpSettings, Settings, load_settings
from aggregator.core.errors import ConfigError
from aggregator.core.events import EventBus, HarvestEvent, JobFailed
from aggregator.demo.peers.oaipmh import OaiPmhPeer
from aggregator.demo.peers.oaipmh_items import MemoryItems, OaiItem
from aggregator.demo.peers.sample_data import generate_dataset, generate_identifier
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.smtp import SmtpPeer
from aggregator.jobs.notify import Notice, Notifier, NotifySettings, parse_notify
from aggregator.jobs.pipeline import run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
PASSWORD = "smtp-Pa55-word"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def smtp() -> Iterator[SmtpPeer]:
    with SmtpPeer(users={"aggregator": PASSWORD}) as peer:
        yield peer


@pytest.fixture
def syslog() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(5)
        yield s


def notify_toml(smtp: SmtpPeer, syslog_port: int, extra: str = "") -> str:
    return f"""
[notify]
log_file = "logs/events.log"
syslog = "127.0.0.1:{syslog_port}"
admin_email = "ops@aggregator.example"
escalation_email = "head@aggregator.example, cto@aggregator.example"

[notify.smtp]
host = "127.0.0.1"
port = {smtp.port}
sender = "aggregator@aggregator.example"
username = "aggregator"
password_env = "TEST_SMTP_PASSWORD"
timeout = 5

[notify.sites.portal]
admin_email = "webmaster@portal.example"
escalation_email = "chief@portal.example"

[[notify.rules]]
events = ["SourceUnreachable", "JobRecovered", "HARVEST_FAILURE_ESCLTN", "HARVEST_RECOVERED"]
actions = ["LOG2FILE", "LOG2SYSLOG", "SEND_NOTIFICATION"]

[[notify.rules]]
events = ["JobFinished:failed"]
actions = ["log_file"]

[[notify.conditions]]
name = "harvest-failing"
raise_on = ["JobFailed"]
clear_on = ["JobFinished:succeeded"]
escalate_after = 30
escalation = "HARVEST_FAILURE_ESCLTN"
recovery = "HARVEST_RECOVERED"
{extra}
"""


def write_config(tmp: Path, peer_url: str, notify: str) -> Path:
    path = tmp / "aggregator.toml"
    path.write_text(
        f"""
[store]
path = "store"
base_iri = "http://127.0.0.1:8000/"

[sources.portal]
type = "oai-pmh"
url = "{peer_url}"
{notify}""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def peer_url() -> Iterator[str]:
    items = MemoryItems(
        OaiItem(generate_identifier(i), T0, metadata=generate_dataset(i)) for i in range(3)
    )
    with PeerServer(OaiPmhPeer(items)) as server:
        yield f"{server.url}oai"


def test_a_failing_harvest_escalates_then_recovers_with_mail_file_and_syslog(
    tmp_path: Path, smtp: SmtpPeer, syslog: socket.socket, peer_url: str
) -> None:
    config = write_config(tmp_path, peer_url, notify_toml(smtp, syslog.getsockname()[1]))
    settings = load_settings(config, environ={"TEST_SMTP_PASSWORD": PASSWORD})
    settings = Settings(
        config_path=settings.config_path,
        store_path=settings.store_path,
        base_iri=settings.base_iri,
        http=HttpSettings(allow_private=True, retries=0, connect_timeout=2),
        harvest=HarvestSettings(workers=0),
        sources=settings.sources,
        notify=settings.notify,
    )
    clock = Clock()
    bus = EventBus()
    heard: list[str] = []
    notifier = Notifier(settings.notify, clock=clock)
    notifier.attach(bus)
    bus.subscribe(lambda e: heard.append(getattr(e, "kind", type(e).__name__)))
    store = RecordStore(settings.store_path, settings.base_iri)
    http = HttpClient(settings.http, sleep=lambda s: None)
    down = settings.sources["portal"].__class__(
        name="portal", type="oai-pmh", url=f"http://127.0.0.1:{closed_port()}/oai"
    )
    try:
        run_source(settings, store, down, http=http, events=bus)  # fails at T0
        clock.advance(20)
        run_source(settings, store, down, http=http, events=bus)  # 20 min: not yet
        assert "HARVEST_FAILURE_ESCLTN" not in heard
        clock.advance(15)
        run_source(settings, store, down, http=http, events=bus)  # 35 min: escalates once
        clock.advance(15)
        run_source(settings, store, down, http=http, events=bus)  # still failing: no repeat
        clock.advance(5)
        job = run_source(settings, store, "portal", http=http, events=bus)
    finally:
        store.close()
    assert job.status == "succeeded"
    assert heard.count("HARVEST_FAILURE_ESCLTN") == 1
    assert heard[-3:] == ["JobRecovered", "JobFinished", "HARVEST_RECOVERED"]

    mails = smtp.wait_for(7)
    subjects = [m["Subject"] for m in mails]
    assert subjects == [
        "[ld-aggregator] SourceUnreachable: portal",
        "[ld-aggregator] SourceUnreachable: portal",
        "[ld-aggregator] HARVEST_FAILURE_ESCLTN: portal",  # heard at the third job's start
        "[ld-aggregator] SourceUnreachable: portal",
        "[ld-aggregator] SourceUnreachable: portal",
        "[ld-aggregator] JobRecovered: portal",
        "[ld-aggregator] HARVEST_RECOVERED: portal",
    ]
    assert smtp.logins == ["aggregator"] * 7
    to = [sorted(rcpt) for _, rcpt in smtp.envelopes]
    assert to[0] == ["ops@aggregator.example", "webmaster@portal.example"]
    assert to[2] == ["chief@portal.example", "cto@aggregator.example", "head@aggregator.example"]
    escalation = mails[2].get_content()
    assert "condition: harvest-failing" in escalation
    assert "since: 2026-03-01T09:00:00Z" in escalation
    assert "has lasted 35 min" in escalation
    assert "cleared after 55 min" in mails[6].get_content()

    lines = (tmp_path / "logs" / "events.log").read_text().splitlines()
    assert [ln.split()[2] for ln in lines] == [
        "SourceUnreachable",
        "JobFinished",
        "SourceUnreachable",
        "JobFinished",
        "HARVEST_FAILURE_ESCLTN",
        "SourceUnreachable",
        "JobFinished",
        "SourceUnreachable",
        "JobFinished",
        "JobRecovered",
        "HARVEST_RECOVERED",
    ]
    assert lines[4].split()[1] == "ESCALATION"
    datagrams = [syslog.recv(4096).decode() for _ in range(7)]
    assert datagrams[2].startswith("<26>ld-aggregator: HARVEST_FAILURE_ESCLTN source=portal")
    assert datagrams[0].startswith("<27>ld-aggregator: SourceUnreachable")  # daemon.err
    assert all(PASSWORD not in text for text in [*lines, *datagrams, *map(str, mails)])


def test_quiet_repeats_tick_and_the_state_file_outlive_the_process(
    tmp_path: Path, smtp: SmtpPeer
) -> None:
    table = {
        "smtp": {"host": "127.0.0.1", "port": smtp.port},
        "state_file": "state.json",
        "admin_email": "ops@aggregator.example",
        "escalation_email": "head@aggregator.example",
        "rules": [
            {"events": ["SERVICE_DOWN", "DOWN_ESCLTN", "SERVICE_RECOVERED"], "actions": ["email"]}
        ],
        "conditions": [
            {
                "name": "down",
                "raise_on": ["SERVICE_DOWN"],
                "clear_on": ["SERVICE_UP"],
                "escalate_after": 60,
                "escalation": "DOWN_ESCLTN",
                "recovery": "SERVICE_RECOVERED",
                "quiet_repeats": True,
            }
        ],
    }
    smtp.users = {}  # this server takes mail without a login
    settings = parse_notify(table, tmp_path, environ={})
    clock = Clock()

    def check(up: bool) -> list[str]:
        """One run of a cron-started monitor: a fresh notifier each time."""
        notifier = Notifier(settings, clock=clock)
        bus = EventBus()
        heard: list[str] = []
        bus.subscribe(lambda e: heard.append(getattr(e, "kind", "")))
        notifier.attach(bus)
        kind = "SERVICE_UP" if up else "SERVICE_DOWN"
        bus.emit(Notice(source="site", kind=kind, message="status check", level="info"))
        notifier.tick()
        return heard

    assert check(up=False) == ["SERVICE_DOWN"]
    for _ in range(5):
        clock.advance(10)
        assert check(up=False) == ["SERVICE_DOWN"]  # 10 .. 50 min: quiet
    clock.advance(10)
    assert check(up=False) == ["SERVICE_DOWN", "DOWN_ESCLTN"]  # 60 min
    clock.advance(10)
    assert check(up=False) == ["SERVICE_DOWN"]  # escalated once only
    clock.advance(10)
    assert check(up=True) == ["SERVICE_UP", "SERVICE_RECOVERED"]
    assert check(up=True) == ["SERVICE_UP"]
    subjects = [m["Subject"].split("] ")[1] for m in smtp.wait_for(3)]
    assert subjects == ["SERVICE_DOWN: site", "DOWN_ESCLTN: site", "SERVICE_RECOVERED: site"]
    assert len(smtp.messages) == 3
    assert "cleared after 80 min" in smtp.messages[2].get_content()


def test_tick_escalates_without_a_new_event(tmp_path: Path) -> None:
    settings = parse_notify(
        {
            "log_file": "events.log",
            "rules": [{"events": ["X_ESC"], "actions": ["log_file"]}],
            "conditions": [
                {
                    "name": "x",
                    "raise_on": ["X"],
                    "clear_on": ["X_OK"],
                    "escalate_after": 5,
                    "escalation": "X_ESC",
                }
            ],
        },
        tmp_path,
    )
    clock = Clock()
    notifier = Notifier(settings, clock=clock)
    notifier.handle(Notice(source="s", kind="X", message="broken"))
    clock.advance(4)
    assert notifier.tick() == []
    clock.advance(1)
    [escalation] = notifier.tick()
    assert isinstance(escalation, Notice) and escalation.kind == "X_ESC"
    assert escalation.details["cause"] == "X source=s: broken"
    assert notifier.tick() == []
    assert "ESCALATION X_ESC source=s: x has lasted 5 min" in (tmp_path / "events.log").read_text()


def test_a_refused_login_is_logged_without_the_password_and_other_actions_run(
    tmp_path: Path,
    smtp: SmtpPeer,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = parse_notify(
        {
            "smtp": {
                "host": "127.0.0.1",
                "port": smtp.port,
                "username": "aggregator",
                "password_env": "P",
            },
            "admin_email": "ops@aggregator.example",
            "rules": [{"events": ["JobFailed"], "actions": ["email", "console"]}],
        },
        tmp_path,
        environ={"P": "not-" + PASSWORD},
    )
    notifier = Notifier(settings)
    with caplog.at_level(logging.WARNING, logger="aggregator.notify"):
        notifier.handle(JobFailed(source="portal", job_id=7, message="listing broke"))
    [warning] = [r.getMessage() for r in caplog.records]
    assert "refused the login of 'aggregator' (535)" in warning
    assert PASSWORD not in warning
    assert smtp.failed_logins >= 1 and not smtp.messages  # smtplib tries each mechanism
    err = capsys.readouterr().err
    assert "ERROR JobFailed source=portal job=7: listing broke" in err


@pytest.mark.parametrize(
    ("notify", "message"),
    [
        ('[[notify.rules]]\nevents = ["JobFailed"]\nactions = ["page"]', "unknown action 'page'"),
        (
            '[[notify.rules]]\nevents = ["JobFailed"]\nactions = ["email"]',
            "a rule sends e-mail but [notify.smtp] is not configured",
        ),
        (
            '[[notify.rules]]\nevents = ["JobFailed"]\nactions = ["log_file"]',
            "notify.log_file is not set",
        ),
        ('admin_email = "not an address"', "'not an address' is not an e-mail address"),
        (
            '[[notify.rules]]\nevents = ["X"]\nactions = ["console"]\nto = ["boss"]',
            "'boss' is neither an e-mail address nor one of",
        ),
        ('[notify.smtp]\nhost = "h"\npassword_env = "1X"', "password_env must name"),
        (
            '[[notify.conditions]]\nname = "c"\nraise_on = ["A"]\nclear_on = ["B"]\n'
            'escalation = "E"\nescalate_after = 0',
            "escalate_after must be a positive",
        ),
        ("colour = 1", "[notify]: unknown key(s) colour"),
    ],
)
def test_notify_configuration_errors_are_clear(tmp_path: Path, notify: str, message: str) -> None:
    text = notify if notify.startswith("[") else f"[notify]\n{notify}"
    config = write_config(tmp_path, "http://127.0.0.1:9/oai", text)
    with pytest.raises(ConfigError) as err:
        load_settings(config, environ={})
    assert message in err.value.message


def test_no_notify_section_means_no_rules(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, "http://127.0.0.1:9/oai", ""), environ={})
    assert settings.notify == NotifySettings()


def test_the_smtp_password_is_a_secret_from_the_environment(tmp_path: Path) -> None:
    text = '[notify.smtp]\nhost = "mail.example"\nusername = "u"\npassword_env = "SMTP_PW"'
    settings = load_settings(
        write_config(tmp_path, "http://127.0.0.1:9/oai", text), environ={"SMTP_PW": PASSWORD}
    )
    assert settings.notify.smtp is not None and settings.notify.smtp.password is not None
    assert settings.notify.smtp.password.reveal() == PASSWORD
    assert PASSWORD not in repr(settings.notify)


def test_events_heard_in_order_by_every_subscriber(tmp_path: Path) -> None:
    settings = parse_notify(
        {
            "conditions": [
                {
                    "name": "x",
                    "raise_on": ["X"],
                    "clear_on": ["OK"],
                    "escalate_after": 1,
                    "escalation": "X_ESC",
                    "recovery": "X_REC",
                }
            ]
        },
        tmp_path,
    )
    clock = Clock()
    bus = EventBus()
    heard: list[HarvestEvent] = []
    notifier = Notifier(
        settings,
        clock=clock,
        translators=[
            lambda e: (
                [Notice(source=e.source, kind="X", message="derived")]
                if isinstance(e, JobFailed)
                else []
            )
        ],
    )
    notifier.attach(bus)
    bus.subscribe(heard.append)
    bus.emit(JobFailed(source="s", job_id=1, message="m"))
    clock.advance(2)
    bus.emit(JobFailed(source="s", job_id=2, message="m"))
    bus.emit(Notice(source="s", kind="OK", message="fine", level="info"))
    kinds = [getattr(e, "kind", type(e).__name__) for e in heard]
    assert kinds == ["JobFailed", "X", "JobFailed", "X", "X_ESC", "OK", "X_REC"]


def test_a_cli_harvest_runs_the_configured_rules(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aggregator.cli import main

    notify = '[notify]\nlog_file = "events.log"\n[[notify.rules]]\n'
    notify += 'events = ["JobFinished:failed"]\nactions = ["log_file"]\n'
    notify += "[http]\nallow_private = true\nretries = 0\n[harvest]\nworkers = 0\n"
    config = write_config(tmp_path, f"http://127.0.0.1:{closed_port()}/oai", notify)
    result = CliRunner().invoke(main, ["-c", str(config), "harvest", "portal"])
    assert result.exit_code == 1, result.output
    [line] = (tmp_path / "events.log").read_text().splitlines()
    assert " ERROR JobFinished source=portal job=1: " in line
    # a second configuration replaces the first one's notifier on the process-wide bus
    other = tmp_path / "other"
    other.mkdir()
    config2 = write_config(other, f"http://127.0.0.1:{closed_port()}/oai", notify)
    CliRunner().invoke(main, ["-c", str(config2), "harvest", "portal"])
    assert len((tmp_path / "events.log").read_text().splitlines()) == 1
    assert len((other / "events.log").read_text().splitlines()) == 1
