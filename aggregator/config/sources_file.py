"""Add, edit and remove ``[sources.NAME]`` tables in aggregator.toml, keeping the operator's
comments.

The file stays the single source of truth for configuration; every edit is validated by
loading the result before it is written.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from aggregator.config.loading import load_settings, parse_source
from aggregator.core.errors import ConfigError


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".aggregator-", suffix=".toml")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def add_source(path: Path, name: str, table: Mapping[str, Any], *, replace: bool = False) -> None:
    parse_source(name, table, root=path.resolve().parent)  # fail before touching the file
    doc = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    sources = doc.get("sources")
    if sources is None:
        sources = tomlkit.table(is_super_table=True)
        doc["sources"] = sources
    if name in sources and not replace:
        raise ConfigError(f"a source named {name!r} exists already")
    entry = tomlkit.table()
    for key, value in table.items():
        if isinstance(value, Mapping):
            inline = tomlkit.inline_table()
            inline.update(dict(value))
            entry[key] = inline
        else:
            entry[key] = value
    sources[name] = entry
    text = tomlkit.dumps(doc)
    _check(path, text)
    _write_atomically(path, text)


@dataclass(frozen=True, slots=True)
class SourceEdit:
    """Changes to one source table: keys to set, keys to drop, and entries of its
    ``options``/``secrets`` tables to set or drop."""

    set: Mapping[str, Any] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    unset_options: tuple[str, ...] = ()
    secrets: Mapping[str, str] = field(default_factory=dict)
    unset_secrets: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        subtables = (self.options, self.unset_options, self.secrets, self.unset_secrets)
        return any((self.set, self.unset, *subtables))


def _edit_subtable(
    entry: Any, key: str, put: Mapping[str, Any], drop: Sequence[str], where: str
) -> None:
    table = entry.get(key)
    for k in drop:
        if table is None or k not in table:
            raise ConfigError(f"[{where}]: no {key[:-1]} {k!r} to remove")
        del table[k]
    if put:
        if table is None:
            table = tomlkit.inline_table()
            entry[key] = table
        for k, v in put.items():
            table[k] = v
    if table is not None and not table:
        del entry[key]


def edit_source(path: Path, name: str, edit: SourceEdit) -> None:
    """Change one source in place (its comments and the rest of the file stay); the result
    is checked by loading it before it is written."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    sources = doc.get("sources")
    if sources is None or name not in sources:
        raise ConfigError(f"no source named {name!r} in {path}")
    entry = sources[name]
    where = f"sources.{name}"
    for key in edit.unset:
        if key in entry:
            del entry[key]
    for key, value in edit.set.items():
        entry[key] = value
    _edit_subtable(entry, "options", edit.options, edit.unset_options, where)
    _edit_subtable(entry, "secrets", edit.secrets, edit.unset_secrets, where)
    parse_source(name, entry.unwrap(), root=path.resolve().parent)  # its own error first
    text = tomlkit.dumps(doc)
    _check(path, text)
    _write_atomically(path, text)


def remove_source(path: Path, name: str) -> None:
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    sources = doc.get("sources")
    if sources is None or name not in sources:
        raise ConfigError(f"no source named {name!r}")
    del sources[name]
    _write_atomically(path, tomlkit.dumps(doc))


def _check(path: Path, text: str) -> None:
    probe = path.with_name(f".check-{os.getpid()}-{path.name}")
    probe.write_text(text, encoding="utf-8")
    try:
        load_settings(probe)
    finally:
        probe.unlink(missing_ok=True)
