"""The hostile-ZIP-safe reader used for META-SHARE inventories and resources."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest

from aggregator.core.errors import ParseError, UnsafeInputError
from aggregator.harvest.safe_zip import ZipLimits, check_name, read_members


def make(entries: list[tuple[str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def test_reads_the_expected_members_in_memory() -> None:
    body = make([("metadata.xml", b"<a/>"), ("storage-global.json", b"{}")])
    assert read_members(body, ["metadata.xml", "storage-global.json"], what="t") == [
        b"<a/>",
        b"{}",
    ]


@pytest.mark.parametrize(
    "name", ["../x", "a/../../x", "/abs", "C:/x", "a\\b", "a//b", "./a", "", "a\x00b"]
)
def test_names_that_could_escape_are_refused(name: str) -> None:
    with pytest.raises(UnsafeInputError):
        check_name(name)


def test_too_many_entries_are_refused_before_reading() -> None:
    body = make([(f"f{i}", b"x") for i in range(20)])
    with pytest.raises(UnsafeInputError, match="20 ZIP entries"):
        read_members(body, ["f0"], what="t", limits=ZipLimits(max_entries=16))


def test_extra_missing_or_duplicate_members_are_refused() -> None:
    with pytest.raises(ParseError, match=r"exactly inventory\.json"):
        read_members(make([("inventory.json", b"{}"), ("x", b"")]), ["inventory.json"], what="t")
    with pytest.raises(ParseError):
        read_members(make([]), ["inventory.json"], what="t")


def test_a_declared_size_over_the_cap_or_ratio_is_refused() -> None:
    body = make([("m", b"a" * 100_000)])
    with pytest.raises(UnsafeInputError, match="declares 100000 bytes"):
        read_members(body, ["m"], what="t", limits=ZipLimits(max_member_bytes=50_000))
    with pytest.raises(UnsafeInputError, match="compression ratio"):
        read_members(body, ["m"], what="t", limits=ZipLimits(max_ratio=10))


def _lie_about_size(body: bytes, size: int) -> bytes:
    data = bytearray(body)
    local = data.index(b"PK\x03\x04")
    struct.pack_into("<I", data, local + 22, size)
    central = data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, size)
    return bytes(data)


def test_a_member_inflating_past_its_declared_size_is_stopped() -> None:
    honest = make([("m", bytes(range(256)) * 4000)])  # ~1 MB, compresses little
    lying = _lie_about_size(honest, 1000)
    with pytest.raises((UnsafeInputError, ParseError)):
        read_members(lying, ["m"], what="t")


def test_non_zip_and_truncated_bodies_are_parse_errors() -> None:
    with pytest.raises(ParseError, match="not a ZIP"):
        read_members(b"<html/>", ["m"], what="t")
    with pytest.raises(ParseError):
        read_members(make([("m", b"abc" * 1000)])[:40], ["m"], what="t")


def test_encrypted_members_are_refused() -> None:
    body = bytearray(make([("m", b"secret")], zipfile.ZIP_STORED))
    for magic, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = body.index(magic)
        flags = struct.unpack_from("<H", body, at + offset)[0]
        struct.pack_into("<H", body, at + offset, flags | 1)
    with pytest.raises(UnsafeInputError, match="encrypted"):
        read_members(bytes(body), ["m"], what="t")
