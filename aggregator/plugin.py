"""The public face for plugin authors: everything a harvester, mapper or validator needs.

A third-party plugin imports from this module only; the modules behind it may move (their
paths are not part of the public API), these names stay. See docs/plugins.md for the
contracts and a complete example plugin (``examples/plugin-example/`` in the repository).

- **Harvester** (entry point group ``aggregator.harvesters``): subclass :class:`Harvester`,
  implement ``list_records(request, listing)`` yielding :class:`RawRecord`; fetch through
  ``self.http`` (a :class:`HttpSession`: SSRF guard, timeouts, size caps and retries);
  report completeness on the :class:`Listing`.
- **Mapper** (``aggregator.mappers``): subclass :class:`Mapper`, implement
  ``map_payload(payload, ctx)`` reading the shared parse (:class:`ParsedPayload`:
  ``.xml()``, ``.rdf()``, ``.json()``) and returning :class:`MappedDataset` objects built with
  :func:`mint_iri`, :func:`canonical_ntriples` and :func:`content_hash`.
- **Validator** (``aggregator.validators``): subclass :class:`Validator`, return a
  :class:`ValidationReport` of :class:`Finding` objects (non-conformance is data).
- **Options**: a frozen dataclass in the plugin's ``Options`` attribute, checked when the
  configuration is loaded; :func:`read_options` and friends read it.
- **Errors**: raise :class:`ParseError` / :class:`MappingError` / :class:`UnsafeInputError`
  for one record that cannot be read (the job carries on), :class:`HarvestError` or
  :class:`TransportError` when the listing cannot go on, :class:`ConfigError` for invalid
  options.
"""

from __future__ import annotations

from aggregator.config import SourceConfig
from aggregator.config.plugin_options import (
    complete_options,
    convert_options,
    option_fields,
    read_options,
)
from aggregator.core.errors import (
    AggregatorError,
    ConfigError,
    HarvestError,
    MappingError,
    ParseError,
    TransportError,
    UnsafeInputError,
)
from aggregator.core.input_limits import InputLimitError, InputLimits, dump_record, load_page
from aggregator.core.models import (
    Finding,
    MappedDataset,
    RawRecord,
    Severity,
    Stage,
    ValidationReport,
)
from aggregator.core.registry import HARVESTERS, MAPPERS, VALIDATORS, Registry, registry_of
from aggregator.core.vocab import ADMS, DCAT, DCT, FOAF, PROV, RDF, RDF_TYPE, RDFS, SKOS, VCARD, XSD
from aggregator.core.xml import parse_xml
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.mapping.base import (
    Mapper,
    MappingContext,
    canonical_ntriples,
    content_hash,
    mint_iri,
)
from aggregator.mapping.payload import ParsedPayload
from aggregator.net.client import HttpSession, Response
from aggregator.validate.base import Validator

#: the process's one registry of each kind (:func:`aggregator.core.registry.registry_of`),
#: typed for the parts that run plugins; the configuration checks names against the same
#: objects without importing the base classes
harvesters: Registry[Harvester] = registry_of(HARVESTERS)
mappers: Registry[Mapper] = registry_of(MAPPERS)
validators: Registry[Validator] = registry_of(VALIDATORS)

__all__ = [
    "ADMS",
    "DCAT",
    "DCT",
    "FOAF",
    "PROV",
    "RDF",
    "RDFS",
    "RDF_TYPE",
    "SKOS",
    "VCARD",
    "XSD",
    "AggregatorError",
    "ConfigError",
    "Finding",
    "HarvestError",
    "HarvestRequest",
    "Harvester",
    "HttpSession",
    "InputLimitError",
    "InputLimits",
    "Listing",
    "MappedDataset",
    "Mapper",
    "MappingContext",
    "MappingError",
    "ParseError",
    "ParsedPayload",
    "RawRecord",
    "Response",
    "Severity",
    "SourceConfig",
    "Stage",
    "TransportError",
    "UnsafeInputError",
    "ValidationReport",
    "Validator",
    "canonical_ntriples",
    "complete_options",
    "content_hash",
    "convert_options",
    "dump_record",
    "harvesters",
    "load_page",
    "mappers",
    "mint_iri",
    "option_fields",
    "parse_xml",
    "read_options",
    "validators",
]
