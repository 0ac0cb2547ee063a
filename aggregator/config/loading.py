"""Read ``aggregator.toml`` once into typed settings (:mod:`aggregator.config.settings`), checked
against the registries: every key known, every value of its type and in its range.

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
    max_record_bytes = 16777216         # one record's payload (aggregator.core.input_limits)

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
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aggregator.config.categorisation import parse_categorisation
from aggregator.config.settings import (
    ENV_NAME,
    HEADER_NAME,
    SCHEDULES,
    SOURCE_NAME,
    HarvestSettings,
    HttpSettings,
    RetentionSettings,
    ScheduleSettings,
    Secret,
    ServeSettings,
    Settings,
    SourceConfig,
    ValidationSettings,
)
from aggregator.config.validation_chain import parse_chain, validation_settings
from aggregator.core.errors import ConfigError
from aggregator.core.input_limits import InputLimits
from aggregator.core.registry import HARVESTERS, MAPPERS, registry_of


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
    "harvest.optimize_after": (0, None, False),
    "harvest.optimize_share": (0, 1, False),
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
    where = f"sources.{name}"
    _check_source_keys(name, table, where)
    url = _source_url(table["url"], where)
    harvester, fmt = _source_format(table, where)
    from aggregator.config.profiles import default_chain

    chain = parse_chain(table.get("validation", default_chain(fmt)), where, root, validation)
    schedule, blackout, full_every = _source_timing(table, where)
    notify = _source_notify(table, where)
    workers = table.get("workers")
    whole = isinstance(workers, int) and not isinstance(workers, bool)
    if workers is not None and not (whole and 0 <= workers <= 256):
        raise ConfigError(f"[{where}]: workers must be a whole number from 0 to 256")
    secrets = _source_secrets(table, os.environ if environ is None else environ, where)
    headers = _source_headers(table.get("headers", {}), secrets, where)
    options = table.get("options", {})
    if not isinstance(options, Mapping):
        raise ConfigError(f"[{where}]: options must be a table")
    source = SourceConfig(
        name=name,
        type=table["type"],
        url=url,
        format=fmt,
        publisher=table.get("publisher"),
        schedule=schedule,
        blackout=blackout,
        full_every=full_every,
        notify=notify,
        notify_digest=bool(table.get("notify_digest", False)),
        validation=chain,
        lenient=bool(table.get("lenient", False)),
        strict=_source_strict(table, where),
        workers=workers,
        enabled=bool(table.get("enabled", True)),
        options=dict(options),
        secrets=secrets,
        headers=headers,
        categorisation=parse_categorisation(table.get("categorisation", {}), where, root),
    )
    harvester.check_config(source)
    return source


def _source_strict(table: Mapping[str, Any], where: str) -> bool | None:
    """``strict``: true or false; absent means the chain's default (SourceConfig.policy)."""
    strict = table.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ConfigError(f"[{where}]: strict must be true or false")
    if strict and table.get("lenient"):
        raise ConfigError(f"[{where}]: a source cannot be both strict and lenient")
    return strict


def _check_source_keys(name: str, table: Mapping[str, Any], where: str) -> None:
    """The source's name, its keys known, ``type`` and ``url`` given."""
    if not SOURCE_NAME.match(name):
        raise ConfigError(f"{where}: name must match {SOURCE_NAME.pattern}")
    allowed = set(SourceConfig.__dataclass_fields__) - {"name"}
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(sorted(unknown))}")
    for required in ("type", "url"):
        if not isinstance(table.get(required), str) or not table[required]:
            raise ConfigError(f"[{where}]: '{required}' is required")


def _source_url(url: str, where: str) -> str:
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
    return url


def _source_format(table: Mapping[str, Any], where: str) -> tuple[Any, str]:
    """The source's harvester class (untyped here: the configuration imports no plugin
    code) and the metadata format it maps."""
    # the plugin registries, filled by the plugins' entry points (the configuration imports
    # no plugin: they import it)
    harvesters, mappers = registry_of(HARVESTERS), registry_of(MAPPERS)

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
    return harvester, fmt


def _source_timing(table: Mapping[str, Any], where: str) -> tuple[str, tuple[str, ...], str]:
    """The source's schedule, blackout periods and full_every, checked."""
    from aggregator.config.timing import parse_frequency, parse_period

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
    return str(schedule), tuple(blackout), full_every


def _source_notify(table: Mapping[str, Any], where: str) -> str:
    from aggregator.config.notify import POLICIES

    notify = table.get("notify", "never")
    if notify not in POLICIES:
        raise ConfigError(f"[{where}]: notify must be one of {', '.join(POLICIES)}")
    if not isinstance(table.get("notify_digest", False), bool):
        raise ConfigError(f"[{where}]: notify_digest must be true or false")
    return str(notify)


def _source_secrets(
    table: Mapping[str, Any], env: Mapping[str, str], where: str
) -> dict[str, Secret]:
    """``secrets = { KEY = "ENV_VAR_NAME" }``, each read from the environment."""
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
    return secrets


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
    from aggregator.config.notify import parse_notify

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
    from aggregator.config.timing import parse_frequency, parse_period, parse_timezone

    settings: ScheduleSettings = _dataclass_from(ScheduleSettings, table, "schedule")
    tz = parse_timezone(settings.timezone)
    if settings.window:
        parse_period(settings.window, tz, "schedule.window")
    if settings.full_every != "never":
        parse_frequency(settings.full_every, "schedule.full_every")
    return settings
