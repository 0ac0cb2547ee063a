"""The ``Accept`` header (RFC 9110 section 12.5.1), one reading for every route.

Each offer is scored by the most specific range that matches one of its media types (an
exact type, then ``type/*``, then ``*/*``; among equally specific ranges, the highest q,
then the one listed first), and offers with q = 0 are ruled out. The offer with the highest
q wins; a tie goes to the range the client listed first, then to the server's order of
preference (the order of ``offers``).

Malformed ranges (no ``/``) are skipped; a header with no valid range counts as absent, that
is ``*/*``. A q that is not a number counts as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class MediaRange:
    media: str  # lower case: "type/subtype", "type/*" or "*/*"
    q: float
    position: int  # where the client listed it


ANY = (MediaRange("*/*", 1.0, 0),)


def media_ranges(accept: str | None) -> Sequence[MediaRange]:
    """The valid ranges of an ``Accept`` header; ``*/*`` when there are none."""
    out = []
    for position, part in enumerate((accept or "").split(",")):
        fields = part.split(";")
        media = fields[0].strip().lower()
        kind, slash, sub = media.partition("/")
        if not slash or not kind or not sub:
            continue
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        out.append(MediaRange(media, q, position))
    return out or ANY


def _match(names: Sequence[str], ranges: Sequence[MediaRange]) -> tuple[float, int] | None:
    """(q, position) of the most specific range matching any of ``names``."""
    best: tuple[int, float, int] | None = None  # (specificity, q, -position)
    for name in names:
        major = name.split("/", 1)[0] + "/*"
        for r in ranges:
            if r.media == name:
                specificity = 3
            elif r.media == major:
                specificity = 2
            elif r.media == "*/*":
                specificity = 1
            else:
                continue
            key = (specificity, r.q, -r.position)
            if best is None or key > best:
                best = key
    return None if best is None else (best[1], -best[2])


def best_offer(accept: str | None, offers: Sequence[tuple[K, Sequence[str]]]) -> K | None:
    """The key of the offer the header prefers (see the module docstring), or None when it
    rules out every offer (answer 406). ``offers``: (key, its media types in lower case), in
    the server's order of preference."""
    ranges = media_ranges(accept)
    chosen: K | None = None
    best: tuple[float, int, int] | None = None
    for preference, (key, names) in enumerate(offers):
        found = _match(names, ranges)
        if found is None or found[0] <= 0.0:
            continue
        score = (found[0], -found[1], -preference)
        if best is None or score > best:
            best, chosen = score, key
    return chosen
