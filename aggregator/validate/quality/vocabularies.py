"""The controlled vocabularies and the format table of the MQA, read from ``mappings/``.

* ``mappings/mqa-vocabularies.toml``: which IRIs count as "from a controlled vocabulary" for
  file types, media types, licences and access rights (namespaces plus a code list or a code
  pattern);
* ``mappings/mqa-formats.toml``: one row per EU file type saying whether it is machine-readable
  and non-proprietary, with the IANA media types that stand for it.

Both files are meant to be read and edited by metadata specialists; :func:`load_vocabularies`
checks them and raises :class:`~aggregator.core.errors.ConfigError` on anything malformed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from aggregator.core.errors import ConfigError
from aggregator.core.resources import bundled

__all__ = [
    "DEFAULT_FORMATS_PATH",
    "DEFAULT_VOCABULARIES_PATH",
    "Format",
    "Vocabularies",
    "Vocabulary",
    "default_vocabularies",
    "load_vocabularies",
]

DEFAULT_VOCABULARIES_PATH = bundled("mappings", "mqa-vocabularies.toml")
DEFAULT_FORMATS_PATH = bundled("mappings", "mqa-formats.toml")
VOCABULARY_NAMES = ("file-type", "media-type", "licence", "access-right")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """IRIs under ``namespaces`` whose code is in ``codes`` (or, without codes, matches)."""

    name: str
    label: str
    namespaces: tuple[str, ...]
    codes: frozenset[str] | None = None
    pattern: re.Pattern[str] | None = None

    def code_of(self, iri: str) -> str | None:
        """The code of ``iri`` in this vocabulary, or None when it is not one of its terms."""
        for namespace in self.namespaces:
            if iri.startswith(namespace):
                code = iri[len(namespace) :]
                if self.codes is not None:
                    return code if code in self.codes else None
                if self.pattern is not None and self.pattern.fullmatch(code):
                    return code
                return None
        return None

    def __contains__(self, iri: object) -> bool:
        return isinstance(iri, str) and self.code_of(iri) is not None


@dataclass(frozen=True, slots=True)
class Format:
    """One row of the format table."""

    code: str
    media_types: tuple[str, ...]
    machine_readable: bool
    non_proprietary: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class Vocabularies:
    file_type: Vocabulary
    media_type: Vocabulary
    licence: Vocabulary
    access_right: Vocabulary
    formats: Mapping[str, Format]  # by file-type code
    formats_by_media_type: Mapping[str, Format]  # by IANA media type (lower case)

    def format_of(self, format_iri: str | None, media_type_iri: str | None) -> Format | None:
        """The table row for a distribution: by its file-type IRI, else by its media type."""
        if format_iri is not None:
            code = self.file_type.code_of(format_iri)
            if code is not None and code in self.formats:
                return self.formats[code]
        if media_type_iri is not None:
            media = self.media_type.code_of(media_type_iri)
            if media is not None:
                return self.formats_by_media_type.get(media.lower())
        return None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(value)


def _vocabulary(name: str, table: Any, where: str) -> Vocabulary:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [{name}] is missing")
    unknown = set(table) - {"label", "source", "namespaces", "codes", "pattern"}
    if unknown:
        raise ConfigError(f"{where}: [{name}] has unknown key(s) {', '.join(sorted(unknown))}")
    namespaces = _strings(table.get("namespaces"), f"{where}: {name}.namespaces")
    if not namespaces:
        raise ConfigError(f"{where}: {name}.namespaces is empty")
    codes = None
    pattern = None
    if "codes" in table:
        codes = frozenset(_strings(table["codes"], f"{where}: {name}.codes"))
    elif isinstance(table.get("pattern"), str):
        try:
            pattern = re.compile(table["pattern"])
        except re.error as err:
            raise ConfigError(f"{where}: {name}.pattern: {err}") from err
    else:
        raise ConfigError(f"{where}: [{name}] needs `codes` or `pattern`")
    return Vocabulary(
        name=name,
        label=str(table.get("label", name)),
        namespaces=namespaces,
        codes=codes,
        pattern=pattern,
    )


def _formats(doc: Mapping[str, Any], where: str) -> dict[str, Format]:
    rows = doc.get("format")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{where}: no [[format]] rows")
    formats: dict[str, Format] = {}
    for i, row in enumerate(rows):
        at = f"{where}: format #{i + 1}"
        if not isinstance(row, dict):
            raise ConfigError(f"{at}: expected a table")
        unknown = set(row) - {"code", "media-types", "machine-readable", "non-proprietary", "note"}
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
        code = row.get("code")
        if not isinstance(code, str) or not code:
            raise ConfigError(f"{at}: `code` is required")
        for flag in ("machine-readable", "non-proprietary"):
            if not isinstance(row.get(flag), bool):
                raise ConfigError(f"{at} ({code}): `{flag}` must be true or false")
        if code in formats:
            raise ConfigError(f"{at}: {code} is listed twice")
        formats[code] = Format(
            code=code,
            media_types=tuple(m.lower() for m in _strings(row.get("media-types", []), at)),
            machine_readable=row["machine-readable"],
            non_proprietary=row["non-proprietary"],
            note=str(row.get("note", "")),
        )
    return formats


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: {err}") from err


def load_vocabularies(
    vocabularies_path: Path = DEFAULT_VOCABULARIES_PATH,
    formats_path: Path = DEFAULT_FORMATS_PATH,
) -> Vocabularies:
    """Read and check both tables."""
    doc = _read_toml(vocabularies_path)
    where = str(vocabularies_path)
    vocabs = {name: _vocabulary(name, doc.get(name), where) for name in VOCABULARY_NAMES}
    formats = _formats(_read_toml(formats_path), str(formats_path))
    by_media: dict[str, Format] = {}
    for fmt in formats.values():
        for media in fmt.media_types:
            if media in by_media:
                raise ConfigError(
                    f"{formats_path}: media type {media} is listed for both "
                    f"{by_media[media].code} and {fmt.code}"
                )
            by_media[media] = fmt
    return Vocabularies(
        file_type=vocabs["file-type"],
        media_type=vocabs["media-type"],
        licence=vocabs["licence"],
        access_right=vocabs["access-right"],
        formats=formats,
        formats_by_media_type=by_media,
    )


@cache
def default_vocabularies() -> Vocabularies:
    """The bundled tables, read once per process."""
    return load_vocabularies()
