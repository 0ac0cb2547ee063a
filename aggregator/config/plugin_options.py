"""Typed plugin options, checked when the configuration is loaded.

A plugin (harvester, validator) declares its options as a frozen dataclass in its ``Options``
class attribute; the configuration is checked against it by name and type, so a typo or a
string where a number belongs fails ``aggregator config check`` with the source's name rather
than a harvest at 3 a.m.::

    @dataclass(frozen=True, slots=True)
    class XsdOptions:
        schema: Path                      # required (no default); relative to aggregator.toml
        max_findings: int = 50

        def __post_init__(self) -> None:  # further checks: raise ValueError with a message
            if self.max_findings < 1:
                raise ValueError("max_findings must be at least 1")

Field types understood: ``str``, ``int``, ``float``, ``bool``, ``Path`` (an existing file,
resolved against the directory of aggregator.toml), :data:`Directory` (an existing directory,
resolved the same way), ``tuple[str, ...]``, ``tuple[Path, ...]`` (TOML arrays),
``Literal[...]`` of strings, and any of these ``| None``. Paths are handed to the plugin as
``str`` (hashable and picklable, as the worker processes need).

Options are read in two steps so that defaults and overrides can be merged in between:
:func:`convert_options` checks and converts the keys a table gives (a global
``[validation.xsd]`` table, then one step of a source's chain), and :func:`complete_options`
builds the dataclass from the merged values, which checks required fields and runs
``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from aggregator.core.errors import ConfigError

T = TypeVar("T")

Directory = typing.NewType("Directory", str)
"""An option that names an existing directory (relative to aggregator.toml's), as ``str``."""


def option_fields(cls: type[Any]) -> dict[str, Any]:
    """The option names of an options dataclass and their (resolved) types."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _describe(kind: Any) -> str:
    if kind is Path:
        return "a file path"
    if kind is Directory:
        return "a directory"
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return "a list of " + (
            "file paths" if item is Path else f"{getattr(item, '__name__', item)}s"
        )
    if typing.get_origin(kind) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(kind))
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        kind, str(kind)
    )


def _convert(value: Any, kind: Any, where: str, root: Path | None) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return _convert(value, args[0], where, root)
    if origin is typing.Literal:
        if value not in typing.get_args(kind):
            raise ConfigError(f"{where}: expected {_describe(kind)}, got {value!r}")
        return value
    if origin is tuple:
        item = typing.get_args(kind)[0]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected {_describe(kind)}")
        return tuple(_convert(v, item, f"{where}[{i}]", root) for i, v in enumerate(value))
    if kind is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected {_describe(kind)}")
        path = (root / value) if root is not None else Path(value)
        if not path.is_file():
            raise ConfigError(f"{where}: no such file {path}")
        return str(path.resolve())
    if kind is Directory:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected {_describe(kind)}")
        path = (root / value) if root is not None else Path(value)
        if not path.is_dir():
            raise ConfigError(f"{where}: no such directory {path}")
        return str(path.resolve())
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{where}: expected {_describe(kind)}, got {value!r}")
    if isinstance(kind, type) and not isinstance(value, kind):
        raise ConfigError(f"{where}: expected {_describe(kind)}, got {value!r}")
    return value


def convert_options(
    cls: type[Any], table: Mapping[str, Any], where: str, root: Path | None = None
) -> dict[str, Any]:
    """Check the keys and values a table gives against ``cls``; return them converted."""
    known = option_fields(cls)
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(
            f"[{where}]: unknown option(s) {', '.join(unknown)}"
            f" (known: {', '.join(sorted(known)) or 'none'})"
        )
    return {k: _convert(v, known[k], f"{where}.{k}", root) for k, v in table.items()}


def complete_options(cls: type[T], values: Mapping[str, Any], where: str) -> T:
    """Build the options dataclass from converted values: required fields, ``__post_init__``."""
    missing = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"[{where}]: missing required option(s) {', '.join(missing)}")
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"[{where}]: {err}") from err


def read_options(cls: type[T], table: Mapping[str, Any], where: str, root: Path | None = None) -> T:
    """Both steps at once, for options that are not merged from several tables."""
    return complete_options(cls, convert_options(cls, table, where, root), where)
