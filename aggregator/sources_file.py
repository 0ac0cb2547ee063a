"""Add and remove ``[sources.NAME]`` tables in aggregator.toml, keeping the operator's comments.

The file stays the single source of truth for configuration; every edit is validated by
loading the result before it is written.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit

from aggregator.config import load_settings, parse_source
from aggregator.errors import ConfigError


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".aggregator-", suffix=".toml")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def add_source(path: Path, name: str, table: Mapping[str, Any], *, replace: bool = False) -> None:
    parse_source(name, table)  # fail before touching the file
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
