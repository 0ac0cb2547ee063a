"""Read the members of a ZIP body from an untrusted peer, in memory, within limits.

META-SHARE nodes answer with ZIP files (an inventory, one resource per LR); a hostile or
broken node must not make us write files, fill memory or spend minutes inflating. So:

- the body must be a ZIP (local header magic, a readable central directory), else refused;
- the number of entries in the central directory is capped before any member is read;
- every entry name is checked: no absolute path, drive letter, backslash, ``..`` segment,
  empty segment or NUL, and no symbolic link (Unix mode in the external attributes);
- the members must be exactly the expected names, in the expected order (no extras, no
  duplicates); encrypted members are refused;
- declared sizes are checked first (uncompressed size and size / compressed size ratio),
  then the bytes are counted *while* inflating, chunk by chunk: reading stops as soon as the
  member exceeds its declared size, the cap or the ratio, whatever the header said;
- nothing is ever extracted to disk: members are returned as bytes.

Any violation raises :class:`~aggregator.core.errors.UnsafeInputError` (a bomb, a traversal name,
a link) or :class:`~aggregator.core.errors.ParseError` (not a ZIP, wrong members).
"""

from __future__ import annotations

import io
import stat
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from aggregator.core.errors import ParseError, UnsafeInputError

_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or the end record of an empty zip
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class ZipLimits:
    """What a member may cost."""

    max_entries: int = 16  # entries in the central directory
    max_member_bytes: int = 32 * 1024 * 1024  # inflated size of one member
    max_ratio: float = 200.0  # inflated size / compressed size, per member

    def __post_init__(self) -> None:
        if self.max_entries < 1 or self.max_member_bytes < 1 or self.max_ratio < 1:
            raise ValueError("ZIP limits must be positive (ratio at least 1)")


def check_name(name: str) -> None:
    """Refuse a member name that could point outside a directory it were extracted to."""
    if not name or "\x00" in name or "\\" in name:
        raise UnsafeInputError(f"ZIP member name {name!r} is not a plain relative path")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeInputError(f"ZIP member name {name!r} is an absolute path")
    parts = name.split("/")
    if any(p == ".." for p in parts):
        raise UnsafeInputError(f"ZIP member name {name!r} climbs out of its directory ('..')")
    if any(p in ("", ".") for p in parts):
        raise UnsafeInputError(f"ZIP member name {name!r} has an empty or '.' segment")


def _is_link(info: zipfile.ZipInfo) -> bool:
    mode = info.external_attr >> 16
    return info.create_system == 3 and stat.S_ISLNK(mode)


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limits: ZipLimits) -> bytes:
    declared = info.file_size
    if declared > limits.max_member_bytes:
        raise UnsafeInputError(
            f"ZIP member {info.filename!r} declares {declared} bytes"
            f" (at most {limits.max_member_bytes})"
        )
    compressed = max(info.compress_size, 1)
    if declared / compressed > limits.max_ratio:
        raise UnsafeInputError(
            f"ZIP member {info.filename!r} declares a compression ratio of"
            f" {declared / compressed:.0f} (at most {limits.max_ratio:.0f})"
        )
    out = io.BytesIO()
    size = 0
    try:
        with zf.open(info) as member:
            while True:
                chunk = member.read1(_CHUNK) if hasattr(member, "read1") else member.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > declared or size > limits.max_member_bytes:
                    raise UnsafeInputError(
                        f"ZIP member {info.filename!r} inflates past its declared"
                        f" {declared} bytes (or the cap of {limits.max_member_bytes})"
                    )
                if size / compressed > limits.max_ratio:
                    raise UnsafeInputError(
                        f"ZIP member {info.filename!r} inflates at a ratio over"
                        f" {limits.max_ratio:.0f}"
                    )
                out.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError) as err:
        raise ParseError(f"ZIP member {info.filename!r} cannot be read: {err}") from err
    if size != declared:
        raise ParseError(f"ZIP member {info.filename!r} has {size} bytes, declared {declared}")
    return out.getvalue()


def read_members(
    body: bytes, expected: Sequence[str], *, what: str, limits: ZipLimits | None = None
) -> list[bytes]:
    """The contents of the members named ``expected``, which must be all the body holds, in
    this order. ``what`` names the document in errors (``"the inventory of http://..."``)."""
    limits = limits or ZipLimits()
    if not body.startswith(_MAGIC):
        start = body[:60].decode("utf-8", errors="replace")
        raise ParseError(f"{what} is not a ZIP file (it starts with {start!r})")
    try:
        zf = zipfile.ZipFile(io.BytesIO(body))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as err:
        raise ParseError(f"{what} is not a readable ZIP file: {err}") from err
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_entries:
            raise UnsafeInputError(
                f"{what} has {len(infos)} ZIP entries (at most {limits.max_entries})"
            )
        for info in infos:
            check_name(info.filename)
            if _is_link(info):
                raise UnsafeInputError(f"{what}: ZIP member {info.filename!r} is a link")
            if info.flag_bits & 0x1:
                raise UnsafeInputError(f"{what}: ZIP member {info.filename!r} is encrypted")
        names = [i.filename for i in infos]
        if names != list(expected):
            raise ParseError(
                f"{what} must hold exactly {', '.join(expected)} in this order;"
                f" it holds {', '.join(names) or 'nothing'}"
            )
        try:
            return [_read_member(zf, info, limits) for info in infos]
        except UnsafeInputError as err:
            raise UnsafeInputError(f"{what}: {err.message}") from err
        except ParseError as err:
            raise ParseError(f"{what}: {err.message}") from err
