"""`aggregator mdc-monitor` against the local MDR service: status events, their rules, and
the exit status; the configuration's checks of an mdr source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from mdr_env import PASSWORD, USER

from aggregator.cli import main
from aggregator.config import load_settings
from aggregator.core.errors import ConfigError
from aggregator.demo.peers.mdr import MdrService
from aggregator.demo.peers.mdr_pages import load_sample_pages
from aggregator.demo.peers.server import PeerServer


@pytest.fixture
def service() -> Iterator[tuple[MdrService, str]]:
    svc = MdrService({USER: PASSWORD}, load_sample_pages())
    with PeerServer(svc) as server:
        yield svc, f"{server.url}mdr/services/MdrService"


def config(tmp: Path, url: str, options: str = "") -> Path:
    path = tmp / "aggregator.toml"
    path.write_text(
        f"""
[store]
path = "store"
[http]
allow_private = true
retries = 0
[notify]
log_file = "mdc.log"
[[notify.rules]]
events = ["MDR_SERVICE_DOWN", "CMS_DOWN", "DB_DOWN", "MDR_SRV_RECOVERED"]
actions = ["LOG2FILE"]

[sources.portal]
type = "mdr"
url = "{url}"
secrets = {{ password = "PORTAL_MDR_PASSWORD" }}
options = {{ username = "{USER}"{options} }}
""",
        encoding="utf-8",
    )
    return path


def test_the_monitor_reports_each_state_and_runs_the_rules(
    tmp_path: Path, service: tuple[MdrService, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, url = service
    monkeypatch.setenv("PORTAL_MDR_PASSWORD", PASSWORD)
    cfg = config(tmp_path, url)
    run = CliRunner().invoke
    up = run(main, ["-c", str(cfg), "mdc-monitor", "--once"])
    assert up.exit_code == 0, up.output
    assert "portal: MDR_STATUS_OK getStatus: service, CMS and database up" in up.output
    svc.cms_up = False
    svc.db_up = False
    down = run(main, ["-c", str(cfg), "mdc-monitor", "--once"])
    assert down.exit_code == 1
    assert "portal: CMS_DOWN" in down.output and "portal: DB_DOWN" in down.output
    svc.cms_up = svc.db_up = True
    svc.service_up = False
    gone = run(main, ["-c", str(cfg), "mdc-monitor", "--once"])
    assert gone.exit_code == 1
    assert "portal: MDR_SERVICE_DOWN MDR getStatus: HTTP 503" in gone.output
    again = run(main, ["-c", str(cfg), "mdc-monitor", "--once"])
    assert again.exit_code == 1 and "portal: MDR_SERVICE_DOWN" in again.output
    svc.service_up = True
    back = run(main, ["-c", str(cfg), "mdc-monitor", "--once"])
    assert "portal: MDR_SRV_RECOVERED" in back.output
    lines = (tmp_path / "mdc.log").read_text().splitlines()
    # each kind of outage runs its actions once while the condition is open
    kinds = [line.split()[2] for line in lines]
    assert kinds == ["CMS_DOWN", "DB_DOWN", "MDR_SERVICE_DOWN", "MDR_SRV_RECOVERED"]
    assert (tmp_path / "store" / "notify-state.json").exists()


def test_an_unset_password_is_a_down_service_naming_the_variable(
    tmp_path: Path, service: tuple[MdrService, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PORTAL_MDR_PASSWORD", raising=False)
    result = CliRunner().invoke(
        main, ["-c", str(config(tmp_path, service[1])), "mdc-monitor", "--once"]
    )
    assert result.exit_code == 1
    assert "needs environment variable 'PORTAL_MDR_PASSWORD'" in result.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (", chunk_minutes = 0", "chunk_minutes must be 1 to 65535 minutes"),
        (', since = "yesterday"', "since 'yesterday' is not an ISO date-time"),
        (", rate = -1", "rate must be 0"),
        (", end_margin_seconds = -1", "end_margin_seconds must be 0 to 86400 seconds"),
        (", end_margin_seconds = 86401", "end_margin_seconds must be 0 to 86400 seconds"),
    ],
)
def test_mdr_options_are_checked_at_load(tmp_path: Path, options: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(config(tmp_path, "http://127.0.0.1:9/mdr", options), environ={})
    assert message in err.value.message


def test_an_mdr_source_needs_its_password_secret(tmp_path: Path) -> None:
    path = config(tmp_path, "http://127.0.0.1:9/mdr")
    path.write_text(
        path.read_text().replace('secrets = { password = "PORTAL_MDR_PASSWORD" }\n', "")
    )
    with pytest.raises(ConfigError, match="an mdr source needs secrets"):
        load_settings(path, environ={})
