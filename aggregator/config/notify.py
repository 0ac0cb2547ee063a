"""The ``[notify]`` section of ``aggregator.toml``: rules, conditions, contacts, SMTP.

Example (every key optional; without a ``[notify]`` section nothing but the log hears
events)::

    [notify]
    log_file = "logs/events.log"        # the log_file action's file (relative to this file)
    syslog = "/dev/log"                 # the syslog action's socket, or "host:port" (UDP)
    state_file = "notify-state.json"    # open conditions (default: <store>/notify-state.json)
    admin_email = "ops@example.org"     # the aggregator's operators (';' or ',' separated)
    escalation_email = "head@example.org"

    [notify.smtp]
    host = "smtp.example.org"
    port = 587
    sender = "aggregator@example.org"
    username = "aggregator"             # optional: log in
    password_env = "SMTP_PASSWORD"      # the password's environment variable, never the value
    security = "starttls"               # none | starttls | ssl
    timeout = 30.0

    [notify.sites.portal]               # a source's own contacts (the MDC's WebsiteEmailId)
    admin_email = "webmaster@portal.example"
    escalation_email = "head@portal.example"

    [[notify.rules]]                    # which events run which actions
    events = ["JobFailed", "SourceUnreachable", "MDR_SERVICE_DOWN"]
    actions = ["log_file", "console", "syslog", "email"]
    sources = ["portal"]                # default: every source
    to = ["site_admin", "admin"]        # e-mail recipients (default: by the event's level)

    [[notify.conditions]]               # an error condition that escalates when it lasts
    name = "harvest-failing"
    raise_on = ["JobFailed"]
    clear_on = ["JobFinished:succeeded"]
    escalate_after = 120                # minutes
    escalation = "HARVEST_FAILURE_ESCLTN"
    recovery = "HARVEST_RECOVERED"      # optional: a Notice when an open condition clears

Actions also take the MDC specification's names: ``LOG2FILE``, ``LOG2CONSOLE``,
``LOG2SYSLOG``, ``SEND_NOTIFICATION``. Recipients (``to``): ``admin`` and ``escalation`` (the
operators' addresses above), ``site_admin`` and ``site_escalation`` (the event's source's),
or literal addresses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from aggregator.config.secret import ENV_NAME, Secret
from aggregator.core.errors import ConfigError

#: a source's ``notify`` policy -> the events it mails about (aggregator.jobs.notify.policy); here,
#: with the section, so that the configuration checks the key without importing the notifier
POLICIES: Mapping[str, tuple[str, ...]] = {
    "never": (),
    "on-error": ("JobFailed", "JobRecovered"),
    "always": ("JobFinished",),
    "on-error-or-change": ("JobFailed", "JobRecovered", "SOURCE_CHANGED"),
}

ACTIONS = ("log_file", "console", "syslog", "email")
SPEC_ACTIONS = {
    "LOG2FILE": "log_file",
    "LOG2CONSOLE": "console",
    "LOG2SYSLOG": "syslog",
    "SEND_NOTIFICATION": "email",
}
ROLES = ("admin", "escalation", "site_admin", "site_escalation")
ADDRESS = re.compile(r"^[^@\s;,<>]+@[^@\s;,<>]+$")


def split_addresses(value: str | Sequence[str], where: str) -> tuple[str, ...]:
    """Addresses given as ``"a@x; b@y"`` (the specification's form) or a list."""
    items = re.split(r"[;,]", value) if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"[{where}]: addresses must be strings")
        item = item.strip()
        if not item:
            continue
        if not ADDRESS.match(item):
            raise ConfigError(f"[{where}]: {item!r} is not an e-mail address")
        out.append(item)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    host: str
    port: int = 25
    sender: str = "aggregator@localhost"
    username: str = ""
    password: Secret | None = None
    security: str = "none"  # none | starttls | ssl
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class Contacts:
    admin: tuple[str, ...] = ()
    escalation: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    """Events of these kinds (from these sources, or any) run these actions."""

    events: tuple[str, ...]
    actions: tuple[str, ...]
    sources: tuple[str, ...] = ()  # empty: every source
    to: tuple[str, ...] = ()  # e-mail recipients; empty: by the event's level

    def matches(self, kinds: Sequence[str], source: str) -> bool:
        return (not self.sources or source in self.sources) and any(k in self.events for k in kinds)


@dataclass(frozen=True, slots=True)
class Condition:
    """An error condition per source: opened by a ``raise_on`` event, closed by a
    ``clear_on`` event; lasting ``escalate_after`` it raises the ``escalation`` Notice once,
    and when it clears the ``recovery`` Notice (if named).

    ``after_by_source`` overrides the duration for some sources; ``quiet_repeats``: an event
    of a kind that already raised the open condition runs no actions (a service found down
    at every check mails once, when it goes down; a database found down after the CMS still
    mails)."""

    name: str
    raise_on: tuple[str, ...]
    clear_on: tuple[str, ...]
    escalate_after: timedelta
    escalation: str
    recovery: str = ""
    after_by_source: Mapping[str, timedelta] = field(default_factory=dict)
    quiet_repeats: bool = False
    sources: tuple[str, ...] = ()  # empty: every source

    def duration(self, source: str) -> timedelta:
        return self.after_by_source.get(source, self.escalate_after)

    def applies(self, source: str) -> bool:
        return not self.sources or source in self.sources


@dataclass(frozen=True, slots=True)
class NotifySettings:
    rules: tuple[Rule, ...] = ()
    conditions: tuple[Condition, ...] = ()
    operators: Contacts = field(default_factory=Contacts)
    sites: Mapping[str, Contacts] = field(default_factory=dict)
    smtp: SmtpSettings | None = None
    log_file: Path | None = None
    syslog: str = ""
    state_file: Path | None = None

    def site(self, source: str) -> Contacts:
        return self.sites.get(source, Contacts())


def _strings(table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"[{where}]: {key} must be a list of strings")
    return tuple(value)


def _only(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{where}] must be a table")
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(sorted(unknown))}")


def _contacts(table: Mapping[str, Any], where: str) -> Contacts:
    return Contacts(
        admin=split_addresses(table.get("admin_email", ()), where),
        escalation=split_addresses(table.get("escalation_email", ()), where),
    )


def _rule(table: Mapping[str, Any], where: str) -> Rule:
    _only(table, {"events", "actions", "sources", "to"}, where)
    events = _strings(table, "events", where)
    if not events:
        raise ConfigError(f"[{where}]: events is required")
    actions: list[str] = []
    for action in _strings(table, "actions", where):
        name = SPEC_ACTIONS.get(action, action)
        if name not in ACTIONS:
            known = ", ".join((*ACTIONS, *SPEC_ACTIONS))
            raise ConfigError(f"[{where}]: unknown action {action!r} (known: {known})")
        actions.append(name)
    if not actions:
        raise ConfigError(f"[{where}]: actions is required")
    to: list[str] = []
    for item in _strings(table, "to", where):
        if item not in ROLES and not ADDRESS.match(item):
            raise ConfigError(
                f"[{where}]: to: {item!r} is neither an e-mail address nor one of {ROLES}"
            )
        to.append(item)
    return Rule(tuple(events), tuple(actions), _strings(table, "sources", where), tuple(to))


def _minutes(value: Any, where: str) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"[{where}]: escalate_after must be a positive number of minutes")
    return timedelta(minutes=value)


def _condition(table: Mapping[str, Any], where: str) -> Condition:
    keys = {"name", "raise_on", "clear_on", "escalate_after", "escalation", "recovery"}
    _only(table, keys | {"sources", "quiet_repeats"}, where)
    for key in ("name", "escalation"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ConfigError(f"[{where}]: '{key}' is required")
    raise_on, clear_on = _strings(table, "raise_on", where), _strings(table, "clear_on", where)
    if not raise_on or not clear_on:
        raise ConfigError(f"[{where}]: raise_on and clear_on are required")
    if "escalate_after" not in table:
        raise ConfigError(f"[{where}]: 'escalate_after' (minutes) is required")
    return Condition(
        name=table["name"],
        raise_on=raise_on,
        clear_on=clear_on,
        escalate_after=_minutes(table["escalate_after"], where),
        escalation=table["escalation"],
        recovery=str(table.get("recovery", "")),
        quiet_repeats=bool(table.get("quiet_repeats", False)),
        sources=_strings(table, "sources", where),
    )


def _smtp(table: Mapping[str, Any], environ: Mapping[str, str], where: str) -> SmtpSettings:
    keys = {"host", "port", "sender", "username", "password_env", "security", "timeout"}
    _only(table, keys, where)
    if not isinstance(table.get("host"), str) or not table["host"]:
        raise ConfigError(f"[{where}]: 'host' is required")
    port = table.get("port", 25)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"[{where}]: port must be 1-65535")
    security = table.get("security", "none")
    if security not in ("none", "starttls", "ssl"):
        raise ConfigError(f"[{where}]: security must be none, starttls or ssl")
    timeout = table.get("timeout", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"[{where}]: timeout must be a positive number of seconds")
    sender = str(table.get("sender", "aggregator@localhost"))
    if not ADDRESS.match(sender):
        raise ConfigError(f"[{where}]: sender {sender!r} is not an e-mail address")
    password: Secret | None = None
    if "password_env" in table:
        env_name = table["password_env"]
        if not isinstance(env_name, str) or not ENV_NAME.match(env_name):
            raise ConfigError(f"[{where}]: password_env must name an environment variable")
        password = Secret(env_name, environ.get(env_name))
    return SmtpSettings(
        host=table["host"],
        port=port,
        sender=sender,
        username=str(table.get("username", "")),
        password=password,
        security=security,
        timeout=float(timeout),
    )


def parse_notify(
    table: Mapping[str, Any], root: Path, environ: Mapping[str, str] | None = None
) -> NotifySettings:
    """Check and build the ``[notify]`` section; paths relative to ``root``."""
    where = "notify"
    keys = {"log_file", "syslog", "state_file", "admin_email", "escalation_email"}
    _only(table, keys | {"smtp", "sites", "rules", "conditions"}, where)
    env = os.environ if environ is None else environ
    sites_table = table.get("sites", {})
    if not isinstance(sites_table, Mapping):
        raise ConfigError(f"[{where}.sites] must be a table of sources")
    sites: dict[str, Contacts] = {}
    for name, site in sites_table.items():
        at = f"notify.sites.{name}"
        _only(site, {"admin_email", "escalation_email"}, at)
        sites[name] = _contacts(site, at)
    rules = table.get("rules", [])
    conditions = table.get("conditions", [])
    if not isinstance(rules, list) or not isinstance(conditions, list):
        raise ConfigError(f"[{where}]: rules and conditions are arrays of tables ([[...]])")
    parsed_rules = tuple(_rule(r, f"notify.rules[{i}]") for i, r in enumerate(rules, 1))
    smtp = _smtp(table["smtp"], env, "notify.smtp") if "smtp" in table else None
    if smtp is None and any("email" in r.actions for r in parsed_rules):
        raise ConfigError("[notify]: a rule sends e-mail but [notify.smtp] is not configured")
    log_file = root / str(table["log_file"]) if "log_file" in table else None
    if log_file is None and any("log_file" in r.actions for r in parsed_rules):
        raise ConfigError("[notify]: a rule logs to a file but notify.log_file is not set")
    return NotifySettings(
        rules=parsed_rules,
        conditions=tuple(
            _condition(c, f"notify.conditions[{i}]") for i, c in enumerate(conditions, 1)
        ),
        operators=_contacts(table, where),
        sites=sites,
        smtp=smtp,
        log_file=log_file,
        syslog=str(table.get("syslog", "")),
        state_file=root / str(table["state_file"]) if "state_file" in table else None,
    )
