"""One generic registry of named plugins.

Built-in harvesters, mappers and validators are declared as entry points in pyproject.toml,
exactly as a third-party plugin would declare its own (groups ``aggregator.harvesters``,
``aggregator.mappers``, ``aggregator.validators``). Names are checked when the configuration
is loaded, so a typo fails ``aggregator config check`` rather than a harvest at 3 a.m.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import import_module
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from aggregator.errors import RegistryError

T = TypeVar("T")

# Fallback so that the package works from a source tree that was never pip-installed
# (entry points only exist once installed). Keep in step with pyproject.toml.
_BUILTINS: dict[str, dict[str, str]] = {
    "aggregator.harvesters": {
        "oai-pmh": "aggregator.harvest.oaipmh:OaiPmhHarvester",
        "rdf-dump": "aggregator.harvest.rdf_dump:RdfDumpHarvester",
        "sparql": "aggregator.harvest.sparql:SparqlHarvester",
    },
    "aggregator.mappers": {"dcat": "aggregator.mapping.dcat:DcatMapper"},
    "aggregator.validators": {"shacl": "aggregator.validate.shacl:ShaclValidator"},
}


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
        self._refs.update(_BUILTINS.get(self.group, {}))
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
            known = ", ".join(self.names()) or "none"
            raise RegistryError(f"unknown {self.kind} {name!r} (known: {known})")
        plugin = _load_ref(self._refs[name])
        if not isinstance(plugin, type):
            raise RegistryError(f"{self.kind} {name!r} is not a class")
        self._loaded[name] = plugin
        return plugin
