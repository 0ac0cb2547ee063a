"""The arguments of an OAI-PMH 2.0 request: parsing, every rule the protocol sets on them
(section 3.4 and the verbs' definitions), and from/until as bounds on ``modified``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

from aggregator.serve import oai_store as db

MAX_FIELDS = 32
# verb: (required, optional); resumptionToken, where allowed, is exclusive
_VERBS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "Identify": (frozenset(), frozenset()),
    "ListMetadataFormats": (frozenset(), frozenset({"identifier"})),
    "ListSets": (frozenset(), frozenset({"resumptionToken"})),
    "GetRecord": (frozenset({"identifier", "metadataPrefix"}), frozenset()),
    "ListIdentifiers": (
        frozenset({"metadataPrefix"}),
        frozenset({"from", "until", "set", "resumptionToken"}),
    ),
    "ListRecords": (
        frozenset({"metadataPrefix"}),
        frozenset({"from", "until", "set", "resumptionToken"}),
    ),
}
# OAI-PMH 2.0 section 3.4 / the schema's patterns for metadataPrefix and setSpec
_PREFIX = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+$")
_SET = re.compile(r"^[A-Za-z0-9\-_.!~*'()]+(:[A-Za-z0-9\-_.!~*'()]+)*$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SECONDS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_BOUND = "%Y-%m-%dT%H:%M:%S"


class OaiError(Exception):
    """One OAI-PMH error condition; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def parse_args(raw: bytes) -> dict[str, list[str]]:
    """A query string or form body as ``parse_qs`` gives it (repeats kept, blanks kept)."""
    try:
        return parse_qs(
            raw.decode("utf-8", errors="replace"),
            keep_blank_values=True,
            errors="replace",
            max_num_fields=MAX_FIELDS,
        )
    except ValueError as err:
        raise OaiError("badArgument", "too many arguments") from err


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bound(name: str, value: str) -> tuple[datetime, bool]:
    """A from/until value as (datetime, day granularity?)."""
    try:
        if _DAY.match(value):
            return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC), True
        if _SECONDS.match(value):
            return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC), False
    except ValueError:
        pass
    raise OaiError(
        "badArgument",
        f"{name} must be a UTC datestamp YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ (got {value!r})",
    )


def bounds(from_: str | None, until: str | None) -> tuple[str, str]:
    """(lo inclusive, hi exclusive) for ``modified``, from the from/until arguments."""
    lo, hi = db.LOWEST, db.HIGHEST
    start = end = None
    if from_ is not None:
        start, day_from = _bound("from", from_)
        lo = start.strftime(_BOUND)
    if until is not None:
        end, day_until = _bound("until", until)
        try:
            hi = (end + (timedelta(days=1) if day_until else timedelta(seconds=1))).strftime(_BOUND)
        except OverflowError:
            hi = db.HIGHEST
    if start is not None and end is not None:
        if day_from != day_until:
            raise OaiError("badArgument", "from and until have different granularities")
        if start > end:
            raise OaiError("badArgument", "from is later than until")
    return lo, hi


def verb_arguments(args: Mapping[str, Sequence[str]]) -> tuple[str, dict[str, str]]:
    """(verb, its arguments) when the verb exists and its arguments are the ones it takes
    (none repeated, the required ones there, ``resumptionToken`` alone), else
    :class:`OaiError` (badVerb, badArgument). Also used by the fixture provider
    (:mod:`aggregator.demo.peers.oaipmh`)."""
    verbs = args.get("verb", [])
    if len(verbs) != 1 or verbs[0] not in _VERBS:
        raise OaiError("badVerb", "the verb argument is missing, repeated or not a verb")
    verb = verbs[0]
    repeated = sorted(k for k, v in args.items() if len(v) > 1)
    if repeated:
        raise OaiError("badArgument", f"repeated argument(s): {', '.join(repeated)}")
    flat = {k: v[0] for k, v in args.items()}
    given = set(flat) - {"verb"}
    required, optional = _VERBS[verb]
    unknown = given - required - optional
    if unknown:
        raise OaiError("badArgument", f"illegal argument(s): {', '.join(sorted(unknown))}")
    if "resumptionToken" in given:
        if given != {"resumptionToken"}:
            raise OaiError("badArgument", "resumptionToken is an exclusive argument")
    else:
        missing = required - given
        if missing:
            raise OaiError("badArgument", f"missing argument(s): {', '.join(sorted(missing))}")
    return verb, flat


def check_args(args: Mapping[str, Sequence[str]]) -> tuple[str, dict[str, str]]:
    """(verb, its arguments) once every protocol rule on the arguments holds, else
    :class:`OaiError` with the protocol's code."""
    verb, flat = verb_arguments(args)
    given = set(flat) - {"verb"}
    empty = sorted(k for k in given if not flat[k])
    if empty:
        raise OaiError("badArgument", f"empty argument(s): {', '.join(empty)}")
    if "metadataPrefix" in flat and not _PREFIX.match(flat["metadataPrefix"]):
        raise OaiError("badArgument", "metadataPrefix has characters it cannot have")
    if "set" in flat and not _SET.match(flat["set"]):
        raise OaiError("badArgument", "set is not a setSpec")
    bounds(flat.get("from"), flat.get("until"))
    return verb, flat
