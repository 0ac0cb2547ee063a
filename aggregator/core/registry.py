"""One generic registry of named plugins.

Built-in harvesters, mappers and validators are declared as entry points in pyproject.toml,
exactly as a third-party plugin would declare its own (groups ``aggregator.harvesters``,
``aggregator.mappers``, ``aggregator.validators``); that table is the one list of them (entry
points exist once the package is installed: ``make install`` or ``pip install -e .``, as
every way of running it does). Names are checked when the configuration is loaded, so a typo
fails ``aggregator config check`` rather than a harvest at 3 a.m.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from aggregator.core.errors import RegistryError

T = TypeVar("T")


def _load_ref(ref: str) -> object:
    module_name, _, attr = ref.partition(":")
    try:
        return getattr(import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise RegistryError(f"cannot load plugin {ref!r}: {err}") from err


class Registry(Generic[T]):
    """Plugins of one kind, keyed by name; loaded lazily."""

    def __init__(self, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind
        self._refs: dict[str, str] = {}
        self._loaded: dict[str, type[T]] = {}
        self._discovered = False

    def _discover(self) -> None:
        if self._discovered:
            return
        for ep in entry_points(group=self.group):
            self._refs[ep.name] = ep.value
        self._discovered = True

    def register(self, name: str, plugin: type[T]) -> None:
        """Register a class directly (tests, embedding applications)."""
        self._discover()
        self._loaded[name] = plugin
        self._refs[name] = f"{plugin.__module__}:{plugin.__qualname__}"

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._refs)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._refs

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> type[T]:
        self._discover()
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._refs:
            known = ", ".join(self.names()) or (
                f"none: no {self.group} entry points, is the package installed? (pip install -e .)"
            )
            raise RegistryError(f"unknown {self.kind} {name!r} (known: {known})")
        plugin = _load_ref(self._refs[name])
        if not isinstance(plugin, type):
            raise RegistryError(f"{self.kind} {name!r} is not a class")
        self._loaded[name] = plugin
        return plugin


#: the entry-point groups of the plugin kinds, and what a plugin of each is called
HARVESTERS = "aggregator.harvesters"
MAPPERS = "aggregator.mappers"
VALIDATORS = "aggregator.validators"
_KINDS = {HARVESTERS: "harvester", MAPPERS: "mapper", VALIDATORS: "validator"}
_SHARED: dict[str, Registry[Any]] = {}


def registry_of(group: str) -> Registry[Any]:
    """The process's one registry of a plugin kind (made on first use).

    ``aggregator.plugin`` gives them typed to the parts that run plugins; the configuration
    checks names and options through this function, so that it imports none of the plugins'
    base classes (they import the configuration)."""
    if group not in _SHARED:
        _SHARED[group] = Registry(group, _KINDS[group])
    return _SHARED[group]
