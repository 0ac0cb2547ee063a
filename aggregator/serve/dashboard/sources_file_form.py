"""The source form of the dashboard: its fields, read from a posted form or a configured
source, and turned into the ``[sources.NAME]`` table that :mod:`aggregator.config.sources_file`
writes (the same table ``aggregator source add`` builds). Secrets stay a command-line matter
(``aggregator source edit --secret``): the form neither shows nor sets them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError


def option_value(text: str) -> Any:
    """As ``aggregator source add --option``: digits are integers, true/false booleans."""
    lowered = text.lower()
    if text.isdigit():
        return int(text)
    if lowered in ("true", "false"):
        return lowered == "true"
    return text


def _get(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


@dataclass
class SourceForm:
    name: str = ""
    type: str = "oai-pmh"
    url: str = ""
    format: str = ""
    publisher: str = ""
    schedule: str = "daily"
    lenient: bool = False
    enabled: bool = True
    options: str = ""  # KEY=VALUE lines

    @classmethod
    def from_form(cls, form: FormData, name: str | None = None) -> SourceForm:
        return cls(
            name=name if name is not None else _get(form, "name"),
            type=_get(form, "type"),
            url=_get(form, "url"),
            format=_get(form, "format"),
            publisher=_get(form, "publisher"),
            schedule=_get(form, "schedule") or "daily",
            lenient=_get(form, "lenient") == "on",
            enabled=_get(form, "enabled") == "on",
            options=_get(form, "options"),
        )

    @classmethod
    def from_source(cls, src: SourceConfig) -> SourceForm:
        return cls(
            name=src.name,
            type=src.type,
            url=src.url,
            format=src.format,
            publisher=src.publisher or "",
            schedule=src.schedule,
            lenient=src.lenient,
            enabled=src.enabled,
            options="\n".join(f"{k}={_show(v)}" for k, v in src.options.items()),
        )

    def parsed_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n, line in enumerate(self.options.splitlines(), 1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"options, line {n}: {line.strip()!r} is not KEY=VALUE")
            out[key.strip()] = option_value(value.strip())
        return out

    def table(self) -> dict[str, Any]:
        """The source's table (``name`` is its key, not part of it)."""
        table: dict[str, Any] = {"type": self.type, "url": self.url, "schedule": self.schedule}
        if self.format:
            table["format"] = self.format
        if self.publisher:
            table["publisher"] = self.publisher
        table["lenient"] = self.lenient
        table["enabled"] = self.enabled
        options = self.parsed_options()
        if options:
            table["options"] = options
        return table


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
