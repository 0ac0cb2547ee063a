"""The typed settings: one frozen dataclass per table of ``aggregator.toml`` (``[http]``,
``[harvest]``, ``[serve]``, ``[schedule]``, ``[retention]``, ``[validation]``), a source
(:class:`SourceConfig`) and the whole (:class:`Settings`), read from the file by
:mod:`aggregator.config.loading`.

Nothing reads the environment after start-up: secrets are named in the file by environment
variable (``secrets = { api_key = "PORTAL_API_KEY" }``) and resolved at load time into
:class:`Secret` objects whose ``repr`` never shows the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aggregator.config.categorisation import CategorisationConfig
from aggregator.config.secret import ENV_NAME as ENV_NAME
from aggregator.config.secret import Secret as Secret
from aggregator.core.errors import ConfigError
from aggregator.core.input_limits import InputLimits

if TYPE_CHECKING:
    from aggregator.config.notify import NotifySettings

SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
SCHEDULES = ("manual", "hourly", "daily", "weekly", "monthly")
#: chain steps whose specification rejects every non-conformant record: a source whose chain
#: has one is strict unless it says ``strict = false`` (UK GEMINI 2.3: "metadata that fails
#: validation is not published"; the step the ``gemini`` profile adds, config/profiles.py)
STRICT_BY_SPECIFICATION = frozenset({"gemini-2.3"})


class ViolationPolicy(StrEnum):
    """What a violation does to a record (aggregator/validate/policy.py, docs/validation.md).

    ``flag``: a record that cannot be used is rejected; one that breaks a rule its source
    must fix is stored, flagged with its findings (the default). ``strict``: any violation
    rejects. ``lenient``: every record that maps is stored, flagged.
    """

    FLAG = "flag"
    STRICT = "strict"
    LENIENT = "lenient"


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
    # a job that wrote at least this many records (0: never) and at least optimize_share of
    # the store compacts it at its end (aggregator/store/optimize.py)
    optimize_after: int = 10_000
    optimize_share: float = 0.2


@dataclass(frozen=True, slots=True)
class ValidationStep:
    """One step of a source's validation chain: a validator and its options.

    ``options`` are the constructor arguments, already checked against the validator's
    ``Options`` and merged (the global ``[validation.NAME]`` table, overridden by the step's
    own keys); hashable and picklable, as the worker processes need. ``name`` labels the
    step's findings on the job and in the dead-letter store (default: the validator's name).
    """

    validator: str
    options: tuple[tuple[str, Any], ...] = ()
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.validator

    def describe(self) -> dict[str, Any]:
        return {"validator": self.validator, "name": self.label, "options": dict(self.options)}


@dataclass(frozen=True, slots=True)
class ValidationSettings:
    """Default options for the validators, by validator name (``[validation.NAME]``).

    ``[validation.shacl]`` takes ``shapes`` (replace the bundled DCAT-AP 3 shapes),
    ``extra_shapes`` (add a national profile) and ``engine`` (``shacl`` or ``pyshacl``);
    ``[validation.xsd]`` ``schema``; ``[validation.schematron]`` ``rules`` and ``phase``.
    Relative paths are relative to aggregator.toml. A step of a source's chain starts from
    these and overrides them key by key.
    """

    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def step(
        self, validator: str, overrides: Mapping[str, Any] | None = None, name: str = ""
    ) -> ValidationStep:
        """A chain step for ``validator``: these defaults, overridden by ``overrides`` (already
        converted by :func:`aggregator.config.plugin_options.convert_options`)."""
        merged = {**self.options.get(validator, {}), **(overrides or {})}
        return ValidationStep(validator, tuple(sorted(merged.items())), name)


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
    # password hashes at once per serving process (each is costly on purpose:
    # docs/benchmarks.md#dashboard)
    admin_hash_concurrency: int = 2
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


def violation_policy(
    chain: Sequence[ValidationStep], *, strict: bool | None = None, lenient: bool = False
) -> ViolationPolicy:
    """The policy of a chain: ``lenient`` or ``strict`` as given, else strict for a chain
    with a step of :data:`STRICT_BY_SPECIFICATION` (the GEMINI rules), else flag. What a
    source's records get (:attr:`SourceConfig.policy`) and ``aggregator validate --profile``."""
    if lenient:
        return ViolationPolicy.LENIENT
    if strict is None:
        strict = any(step.label in STRICT_BY_SPECIFICATION for step in chain)
    return ViolationPolicy.STRICT if strict else ViolationPolicy.FLAG


@dataclass(frozen=True, slots=True)
class SourceConfig:
    name: str
    type: str  # harvester registry key
    url: str
    format: str = "dcat"  # mapper registry key
    publisher: str | None = None
    schedule: str = "daily"  # manual, hourly, daily, weekly, monthly or a cron expression
    blackout: tuple[str, ...] = ()  # periods not to harvest in (aggregator.config.timing)
    full_every: str = ""  # full re-harvest frequency ("": [schedule] full_every; "never")
    notify: str = "never"  # never | on-error | always | on-error-or-change (notify/policy.py)
    notify_digest: bool = False  # one mail per day instead of one per event
    validation: tuple[ValidationStep, ...] = (ValidationStep("shacl"),)
    lenient: bool = False  # store every record that maps, violations and all, flagged
    # reject on any violation (None: strict only if the chain's specification says so)
    strict: bool | None = None
    workers: int | None = None  # mapping/validation processes for this source ([harvest])
    enabled: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, Secret] = field(default_factory=dict)
    # default HTTP headers of this source's session only; a Secret value is a credential
    headers: Mapping[str, str | Secret] = field(default_factory=dict)
    # EU data-theme categorisation after mapping (aggregator/mapping/categorisation.py)
    categorisation: CategorisationConfig = field(default_factory=CategorisationConfig)

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)

    @property
    def policy(self) -> ViolationPolicy:
        """What a violation does to this source's records: ``lenient`` or ``strict`` as the
        source says, else strict for a chain of :data:`STRICT_BY_SPECIFICATION`, else flag."""
        return violation_policy(self.validation, strict=self.strict, lenient=self.lenient)

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
    #: ``[input]``: the size and content limits of every payload (aggregator.core.input_limits)
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
    from aggregator.config.notify import NotifySettings

    return NotifySettings()
