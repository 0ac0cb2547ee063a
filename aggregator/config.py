"""Typed settings, loaded once from ``aggregator.toml`` and validated against the registries.

Nothing reads the environment after start-up: secrets are named in the file by environment
variable (``secrets = { api_key = "PORTAL_API_KEY" }``) and resolved here into :class:`Secret`
objects whose ``repr`` never shows the value.

Example::

    [store]
    path = "data"                       # relative to this file
    base_iri = "https://data.example.org/"

    [http]
    timeout = 30
    allow_private = false               # the SSRF guard; only tests and the demo turn it off

    [harvest]
    withdraw_brake = 0.2                # refuse to withdraw more than 20 % of a source

    [input]
    max_record_bytes = 16777216         # one record's payload (aggregator.input_limits)

    [sources.portal]
    type = "oai-pmh"
    url = "https://portal.example.org/oai"
    publisher = "Example Agency"
    schedule = "daily"
    options = { metadata_prefix = "dcat_ap" }
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aggregator.categorisation import CategorisationConfig, parse_categorisation
from aggregator.config_secret import ENV_NAME as ENV_NAME
from aggregator.config_secret import Secret as Secret
from aggregator.config_validation import (
    NAME,
    parse_chain,
    validation_settings,
)
from aggregator.config_validation import ValidationSettings as ValidationSettings
from aggregator.config_validation import ValidationStep as ValidationStep
from aggregator.errors import ConfigError
from aggregator.input_limits import InputLimits
from aggregator.registry import HARVESTERS, MAPPERS, registry_of

if TYPE_CHECKING:
    from aggregator.notify.settings import NotifySettings

SOURCE_NAME = NAME  # a source's name (and a validation step's label)
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
SCHEDULES = ("manual", "hourly", "daily", "weekly", "monthly")


@dataclass(frozen=True, slots=True)
class HttpSettings:
    timeout: float = 30.0  # read timeout, seconds
    connect_timeout: float = 10.0
    max_bytes: int = 256 * 1024 * 1024  # per response
    max_redirects: int = 5
    retries: int = 4  # on 429/5xx/connection errors
    backoff: float = 0.5  # first retry delay; doubles, with jitter
    max_backoff: float = 60.0  # cap on any delay, Retry-After included
    per_host_concurrency: int = 4
    allow_private: bool = False  # SSRF guard off: only tests and the demo
    user_agent: str = "ld-aggregator/0.1 (+https://github.com/ld-aggregator)"


@dataclass(frozen=True, slots=True)
class HarvestSettings:
    withdraw_brake: float = 0.2  # share of a source's active records
    batch_size: int = 1000  # records per journal transaction (and graph-store bulk load)
    workers: int = 1  # mapping/validation worker processes (0 = in-process)


@dataclass(frozen=True, slots=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    public_base_url: str = ""  # where clients reach us; defaults to the store's base IRI
    oai_page_size: int = 100
    oai_token_ttl: int = 86_400  # seconds a resumption token stays valid
    oai_token_key_env: str = ""  # env var holding the HMAC key; empty: a key kept in the store
    oai_repository_name: str = "ld-aggregator"
    oai_admin_email: str = "admin@example.org"
    sparql_timeout: float = 30.0  # seconds; enforced outside the query engine
    sparql_max_rows: int = 100_000
    sparql_concurrency: int = 4  # queries at once in each serving process
    # serving processes, one of them a standby; 0: as many as CPUs, at least 2, at most 4
    processes: int = 0
    catalog_page_size: int = 100
    catalog_title: str = ""  # the aggregate catalogue's dct:title (default: repository name)
    catalog_description: str = ""
    catalog_publisher: str = ""  # name of the agent publishing the aggregate
    catalog_email: str = ""  # its contact e-mail (default: oai_admin_email)
    # the dashboard (docs/serve/dashboard.md): read-only pages public, or behind the login;
    # admin actions always need the admin user's password or the API token (both stored as
    # scrypt hashes made by `aggregator dashboard-hash`; empty: no admin actions at all)
    dashboard_public: bool = True
    admin_user: str = "admin"
    admin_password_hash: str = ""
    admin_token_hash: str = ""
    # failed password / token checks per client address (IPv6: per /64) in the window, in all
    # serving processes together; past them: 429 with Retry-After, and nothing is hashed
    admin_max_failures: int = 10
    admin_failure_window: float = 300.0  # seconds
    admin_hash_concurrency: int = 2  # hashes (~30 ms of CPU each) at once per serving process
    # reverse proxies (addresses or networks, comma-separated) whose X-Forwarded-For names
    # the client whose failures are counted; empty: the address that connected is the client
    trusted_proxies: str = ""
    # the dataset page's map: a world outline is drawn offline; with a tile server URL
    # ("https://{s}.tile.example.org/{z}/{x}/{y}.png") its tiles are drawn instead, with the
    # attribution text its terms ask for (required with a URL)
    map_tiles: str = ""
    map_attribution: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleSettings:
    """``[schedule]``: the scheduler (``aggregator scheduler``, and inside ``serve``)."""

    window: str = "22:00-06:00"  # when named frequencies start jobs ("": any time)
    timezone: str = "UTC"  # of the window and the blackout periods
    parallel: int = 2  # jobs of different sources at once
    full_every: str = "weekly"  # full re-harvest of incremental sources ("never": none)
    retries: int = 3  # retries of a failed job before waiting for the next due time
    retry_delay: float = 300.0  # seconds before the first retry; doubles, with jitter
    retry_max_delay: float = 3600.0
    breaker_failures: int = 5  # consecutive failed jobs that open the circuit breaker
    breaker_backoff: float = 21600.0  # seconds an open breaker skips the source
    busy_delay: float = 60.0  # another process writes the store: try again after this
    in_serve: bool = True  # ``aggregator serve`` runs the scheduler beside the server


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """``[retention]``: what the state database keeps of the past (``store/retention.py``)."""

    versions: int = 5  # payloads of the last N versions of each record
    job_days: float = 90.0  # jobs that ended longer ago go, with their errors (see the docs)
    interval: float = 86400.0  # seconds between the scheduler's prunes (0: it never prunes)
    batch: int = 500  # rows deleted per transaction


@dataclass(frozen=True, slots=True)
class SourceConfig:
    name: str
    type: str  # harvester registry key
    url: str
    format: str = "dcat"  # mapper registry key
    publisher: str | None = None
    schedule: str = "daily"  # manual, hourly, daily, weekly, monthly or a cron expression
    blackout: tuple[str, ...] = ()  # periods not to harvest in (aggregator.schedule.timing)
    full_every: str = ""  # full re-harvest frequency ("": [schedule] full_every; "never")
    notify: str = "never"  # never | on-error | always | on-error-or-change (notify/policy.py)
    notify_digest: bool = False  # one mail per day instead of one per event
    validation: tuple[ValidationStep, ...] = (ValidationStep("shacl"),)
    lenient: bool = False  # store records that fail validation, with their findings
    workers: int | None = None  # mapping/validation processes for this source ([harvest])
    enabled: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, Secret] = field(default_factory=dict)
    # default HTTP headers of this source's session only; a Secret value is a credential
    headers: Mapping[str, str | Secret] = field(default_factory=dict)
    # EU data-theme categorisation after mapping (aggregator/categorisation.py)
    categorisation: CategorisationConfig = field(default_factory=CategorisationConfig)

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)

    def missing_secrets(self) -> list[str]:
        """The secrets whose environment variable was not set at load time."""
        return [key for key, secret in self.secrets.items() if secret.missing]

    def require_secrets(self) -> None:
        """Raise ConfigError naming the first secret whose variable is unset (a harvest of
        this source cannot run; the others can)."""
        for key in self.missing_secrets():
            env_name = self.secrets[key].env_name
            raise ConfigError(
                f"[sources.{self.name}]: secret {key!r} needs environment variable"
                f" {env_name!r}, which is not set"
            )


@dataclass(frozen=True, slots=True)
class Settings:
    config_path: Path | None
    store_path: Path
    base_iri: str
    http: HttpSettings = field(default_factory=HttpSettings)
    harvest: HarvestSettings = field(default_factory=HarvestSettings)
    #: ``[input]``: the size and content limits of every payload (aggregator.input_limits)
    input: InputLimits = field(default_factory=InputLimits)
    sources: Mapping[str, SourceConfig] = field(default_factory=dict)
    serve: ServeSettings = field(default_factory=ServeSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    notify: NotifySettings = field(default_factory=lambda: _no_notify())
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)

    def source(self, name: str) -> SourceConfig:
        try:
            return self.sources[name]
        except KeyError:
            raise ConfigError(f"no source named {name!r}") from None

    def with_sources(self, sources: Mapping[str, SourceConfig]) -> Settings:
        return replace(self, sources=dict(sources))


def _no_notify() -> NotifySettings:
    from aggregator.notify.settings import NotifySettings

    return NotifySettings()


def _typed(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float)):
        raise ConfigError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}")
    return value


# The range of each numeric setting: (lowest, highest, whether the lowest is excluded).
# A zero timeout, page or pool would hang, loop or refuse everything; negatives mean nothing.
RANGES: dict[str, tuple[float, float | None, bool]] = {
    "http.timeout": (0, None, True),
    "http.connect_timeout": (0, None, True),
    "http.max_bytes": (0, None, True),
    "http.max_redirects": (0, 100, False),
    "http.retries": (0, 100, False),
    "http.backoff": (0, None, False),
    "http.max_backoff": (0, None, False),
    "http.per_host_concurrency": (1, None, False),
    "input.max_record_bytes": (1, None, False),
    "input.max_text_length": (1, None, False),
    "input.max_json_depth": (1, 900, False),  # the json module recurses ~1,000 deep at most
    "input.max_triples": (1, None, False),
    "harvest.withdraw_brake": (0, 1, False),
    "harvest.batch_size": (1, None, False),
    "harvest.workers": (0, 256, False),
    "serve.port": (1, 65535, False),
    "serve.oai_page_size": (1, 100_000, False),
    "serve.oai_token_ttl": (1, None, False),
    "serve.sparql_timeout": (0, None, True),
    "serve.sparql_max_rows": (1, None, False),
    "serve.sparql_concurrency": (1, None, False),
    "serve.processes": (0, 64, False),
    "serve.catalog_page_size": (1, 100_000, False),
    "serve.admin_max_failures": (1, None, False),
    "serve.admin_failure_window": (0, None, True),
    "serve.admin_hash_concurrency": (1, 64, False),
    "schedule.parallel": (1, 64, False),
    "schedule.retries": (0, 100, False),
    "schedule.retry_delay": (0, None, False),
    "schedule.retry_max_delay": (0, None, False),
    "schedule.breaker_failures": (1, None, False),
    "schedule.breaker_backoff": (0, None, False),
    "schedule.busy_delay": (0, None, True),
    "retention.versions": (1, None, False),
    "retention.job_days": (0, None, False),
    "retention.interval": (0, None, False),
    "retention.batch": (1, None, False),
}


def _check_range(name: str, value: float) -> None:
    bounds = RANGES.get(name)
    if bounds is None:
        return
    low, high, open_low = bounds
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    if value < low or (open_low and value == low):
        relation = "greater than" if open_low else "at least"
        raise ConfigError(f"{name} = {shown}: must be {relation} {low:g}")
    if high is not None and value > high:
        raise ConfigError(f"{name} = {shown}: must be at most {high:g}")


def _dataclass_from(cls: type[Any], table: Mapping[str, Any], where: str) -> Any:
    known = {f for f in cls.__dataclass_fields__}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(sorted(unknown))}")
    defaults = cls()
    values = {k: _typed(table, k, type(getattr(defaults, k)), where) for k in table}
    for key, value in values.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            _check_range(f"{where}.{key}", value)
    return cls(**values)


def _source_headers(
    table: Any, secrets: Mapping[str, Secret], where: str
) -> dict[str, str | Secret]:
    """``headers = { "X-API-Key" = { secret = "api_key" }, "Accept-Language" = "en" }``:
    each value a string or a reference to one of the source's ``secrets``."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{where}]: headers must be a table")
    headers: dict[str, str | Secret] = {}
    for name, value in table.items():
        if not HEADER_NAME.match(name):
            raise ConfigError(f"[{where}]: {name!r} is not an HTTP header name")
        if isinstance(value, str) and "\r" not in value and "\n" not in value:
            headers[name] = value
        elif isinstance(value, Mapping) and set(value) == {"secret"}:
            if value["secret"] not in secrets:
                raise ConfigError(
                    f"[{where}]: header {name!r} names secret {value['secret']!r},"
                    " which is not in the source's secrets"
                )
            headers[name] = secrets[value["secret"]]
        else:
            raise ConfigError(
                f'[{where}]: header {name!r} must be a string or {{ secret = "KEY" }}'
            )
    return headers


def parse_source(
    name: str,
    table: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    root: Path | None = None,
    validation: ValidationSettings | None = None,
) -> SourceConfig:
    """Build and check one source; plugin names and options are checked against the plugins.

    ``root``: the directory relative paths are resolved against (that of aggregator.toml);
    ``validation``: the global validator defaults the source's chain starts from.
    """
    # the plugin registries, filled by the plugins' entry points (the configuration imports
    # no plugin: they import it)
    harvesters, mappers = registry_of(HARVESTERS), registry_of(MAPPERS)
    where = f"sources.{name}"
    if not SOURCE_NAME.match(name):
        raise ConfigError(f"{where}: name must match {SOURCE_NAME.pattern}")
    allowed = set(SourceConfig.__dataclass_fields__) - {"name"}
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(sorted(unknown))}")
    for required in ("type", "url"):
        if not isinstance(table.get(required), str) or not table[required]:
            raise ConfigError(f"[{where}]: '{required}' is required")
    url = table["url"]
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:  # e.g. an unclosed IPv6 bracket
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        raise ConfigError(
            f"[{where}]: url must be an http(s) URL with a host, not {url!r}"
            " (every harvester fetches over HTTP; serve a local file with any web server)"
        )
    kind = table["type"]
    if kind not in harvesters:
        raise ConfigError(f"[{where}]: unknown type {kind!r} (known: {', '.join(harvesters)})")
    harvester = harvesters.get(kind)
    fmt = table.get("format", harvester.formats[0])
    if fmt not in mappers:
        raise ConfigError(f"[{where}]: unknown format {fmt!r} (known: {', '.join(mappers)})")
    if fmt not in harvester.formats and not harvester.any_format:
        raise ConfigError(
            f"[{where}]: a {kind} source yields {', '.join(harvester.formats)}, not {fmt!r}"
        )
    from aggregator.validate.profiles import default_chain

    chain = parse_chain(table.get("validation", default_chain(fmt)), where, root, validation)
    from aggregator.schedule.timing import parse_frequency, parse_period

    schedule = table.get("schedule", "daily")
    if not isinstance(schedule, str):
        raise ConfigError(f"[{where}]: schedule must be one of {SCHEDULES} or a cron expression")
    parse_frequency(schedule, f"{where}.schedule")
    blackout = table.get("blackout", [])
    if isinstance(blackout, str):
        blackout = [blackout]
    if not isinstance(blackout, list) or not all(isinstance(b, str) for b in blackout):
        raise ConfigError(f"[{where}]: blackout must be a list of periods")
    for period in blackout:
        parse_period(period, where=f"{where}.blackout")
    full_every = table.get("full_every", "")
    if not isinstance(full_every, str):
        raise ConfigError(f"[{where}]: full_every must be a frequency or 'never'")
    if full_every and full_every != "never":
        parse_frequency(full_every, f"{where}.full_every")
    from aggregator.notify.settings import POLICIES

    notify = table.get("notify", "never")
    if notify not in POLICIES:
        raise ConfigError(f"[{where}]: notify must be one of {', '.join(POLICIES)}")
    if not isinstance(table.get("notify_digest", False), bool):
        raise ConfigError(f"[{where}]: notify_digest must be true or false")
    workers = table.get("workers")
    whole = isinstance(workers, int) and not isinstance(workers, bool)
    if workers is not None and not (whole and 0 <= workers <= 256):
        raise ConfigError(f"[{where}]: workers must be a whole number from 0 to 256")
    env = os.environ if environ is None else environ
    secrets: dict[str, Secret] = {}
    raw_secrets = table.get("secrets", {})
    if not isinstance(raw_secrets, Mapping):
        raise ConfigError(f'[{where}]: secrets must be a table of KEY = "ENV_VAR_NAME"')
    for key, env_name in dict(raw_secrets).items():
        if not isinstance(env_name, str) or not ENV_NAME.match(env_name):
            raise ConfigError(
                f"[{where}]: secret {key!r} must name an environment variable, not {env_name!r}"
            )
        secrets[key] = Secret(env_name, env.get(env_name))
    headers = _source_headers(table.get("headers", {}), secrets, where)
    options = table.get("options", {})
    if not isinstance(options, Mapping):
        raise ConfigError(f"[{where}]: options must be a table")
    source = SourceConfig(
        name=name,
        type=kind,
        url=url,
        format=fmt,
        publisher=table.get("publisher"),
        schedule=str(schedule),
        blackout=tuple(blackout),
        full_every=full_every,
        notify=notify,
        notify_digest=bool(table.get("notify_digest", False)),
        validation=chain,
        lenient=bool(table.get("lenient", False)),
        workers=workers,
        enabled=bool(table.get("enabled", True)),
        options=dict(options),
        secrets=secrets,
        headers=headers,
        categorisation=parse_categorisation(table.get("categorisation", {}), where, root),
    )
    harvester.check_config(source)
    return source


def load_settings(path: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate ``aggregator.toml``. A missing file is an error (never silently the
    defaults: a mistyped ``-c`` would otherwise open, and create, a store somewhere else)."""
    try:
        doc: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a configuration file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: {err}") from err
    known = {
        "store",
        "http",
        "harvest",
        "input",
        "sources",
        "serve",
        "validation",
        "notify",
        "schedule",
        "retention",
    }
    unknown = set(doc) - known
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(sorted(unknown))}")
    store = dict(doc.get("store", {}))
    root = path.resolve().parent
    store_path = root / str(store.pop("path", "data"))
    base_iri = str(store.pop("base_iri", "http://localhost:8000/"))
    if not re.match(r"^https?://[^\s/]+/", base_iri) or not base_iri.endswith("/"):
        raise ConfigError("store.base_iri must be an http(s) IRI ending in '/'")
    if store:
        raise ConfigError(f"[store]: unknown key(s) {', '.join(sorted(store))}")
    http = _dataclass_from(HttpSettings, doc.get("http", {}), "http")
    harvest = _dataclass_from(HarvestSettings, doc.get("harvest", {}), "harvest")
    input_limits = _dataclass_from(InputLimits, doc.get("input", {}), "input")
    serve = _dataclass_from(ServeSettings, doc.get("serve", {}), "serve")
    _check_map_tiles(serve)
    validation = validation_settings(doc.get("validation", {}), root)
    schedule = _schedule_settings(doc.get("schedule", {}))
    sources = {
        name: parse_source(name, table, environ, root=root, validation=validation)
        for name, table in dict(doc.get("sources", {})).items()
    }
    from aggregator.notify.settings import parse_notify

    return Settings(
        config_path=path,
        store_path=store_path,
        base_iri=base_iri,
        http=http,
        harvest=harvest,
        input=input_limits,
        sources=sources,
        serve=serve,
        validation=validation,
        notify=parse_notify(doc.get("notify", {}), root, environ),
        schedule=schedule,
        retention=_dataclass_from(RetentionSettings, doc.get("retention", {}), "retention"),
    )


#: a tile URL template: http(s), a host (``{s}.`` for the server's subdomains), an optional
#: port, then a path with {z}, {x} and {y}; no character that could end a CSP source or an
#: attribute (the origin goes into the dataset page's Content-Security-Policy)
_TILES = re.compile(r"^(https?)://((?:\{s\}\.)?[A-Za-z0-9.-]+(?::\d{1,5})?)/[^\s;,'\"<>\\]*$")


def tile_origin(template: str) -> str:
    """The CSP source of a tile URL template (``{s}.`` becomes ``*.``); ConfigError if it is
    not one."""
    found = _TILES.match(template)
    if not found or not all(p in template for p in ("{z}", "{x}", "{y}")):
        raise ConfigError(
            f"serve.map_tiles = {template!r}: must be an http(s) URL template with {{z}}, {{x}}"
            " and {y}, e.g. https://tile.example.org/{z}/{x}/{y}.png"
        )
    return f"{found.group(1)}://{found.group(2).replace('{s}.', '*.')}"


def _check_map_tiles(serve: ServeSettings) -> None:
    if not serve.map_tiles:
        return
    tile_origin(serve.map_tiles)
    if not serve.map_attribution.strip():
        raise ConfigError(
            "serve.map_attribution is needed with serve.map_tiles: the attribution text the"
            " tile server's terms ask for"
        )


def _schedule_settings(table: Mapping[str, Any]) -> ScheduleSettings:
    from aggregator.schedule.timing import parse_frequency, parse_period, parse_timezone

    settings: ScheduleSettings = _dataclass_from(ScheduleSettings, table, "schedule")
    tz = parse_timezone(settings.timezone)
    if settings.window:
        parse_period(settings.window, tz, "schedule.window")
    if settings.full_every != "never":
        parse_frequency(settings.full_every, "schedule.full_every")
    return settings
