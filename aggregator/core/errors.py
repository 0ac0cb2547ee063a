"""The exception tree.

Exceptions are for things that cannot run at all; non-conformance is data (see
:class:`aggregator.core.models.ValidationReport`). Every error carries a user-facing message; web
layers map them to responses through ``http_status`` and, for protocol errors, ``code``::

    AggregatorError
    ├── ConfigError                  invalid aggregator.toml, unknown plugin name, missing secret
    ├── RegistryError                plugin cannot be found or loaded
    ├── TransportError               HTTP failed after retries (status, url)
    │   ├── BlockedAddressError      the SSRF guard refused a private/loopback target
    │   ├── ResponseTooLargeError    body exceeded the configured size cap
    │   └── TooManyRedirectsError
    ├── HarvestError                 a protocol-level failure of a listing (code = protocol code)
    ├── UnsafeInputError             hostile XML/RDF: entities, DTDs, bombs
    ├── RecordError family:
    │   ├── ParseError               payload cannot be parsed (per record, not fatal)
    │   └── MappingError             payload parsed but cannot be mapped (per record)
    ├── StoreError                   the record store cannot do what was asked
    │   ├── StoreBusyError           another process is writing the store (names it)
    │   └── StoreVersionError        the state database's schema is older or newer than the code
    └── NotFoundError                a record, job or source does not exist (http 404)
"""

from __future__ import annotations


class AggregatorError(Exception):
    """Base class. ``message`` is safe to show to users; ``http_status`` for web layers."""

    http_status: int = 500
    code: str = "internalError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AggregatorError):
    http_status = 400
    code = "configError"


class RegistryError(AggregatorError):
    code = "registryError"


class TransportError(AggregatorError):
    http_status = 502
    code = "transportError"

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class BlockedAddressError(TransportError):
    code = "blockedAddress"


class ResponseTooLargeError(TransportError):
    code = "responseTooLarge"


class TooManyRedirectsError(TransportError):
    code = "tooManyRedirects"


class HarvestError(AggregatorError):
    """A listing cannot go on: a protocol error code from the source, a broken page."""

    http_status = 502

    def __init__(self, message: str, *, code: str = "harvestError") -> None:
        super().__init__(message)
        self.code = code


class UnsafeInputError(AggregatorError):
    http_status = 400
    code = "unsafeInput"


class ParseError(AggregatorError):
    http_status = 400
    code = "parseError"


class MappingError(AggregatorError):
    http_status = 422
    code = "mappingError"


class StoreError(AggregatorError):
    code = "storeError"


class StoreBusyError(StoreError):
    """Another process is writing the store (it holds the writer lock)."""

    http_status = 409
    code = "storeBusy"


class StoreVersionError(StoreError):
    """The state database's schema version is not this code's: newer (made by a later
    release: refused) or, for a reader, older (a writer upgrades it when it opens the store)."""

    http_status = 503
    code = "storeVersion"


class NotFoundError(AggregatorError):
    http_status = 404
    code = "notFound"
