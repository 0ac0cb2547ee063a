"""How the state database keeps bytes: payloads and graph serialisations as Zstandard frames
(older stores' zlib streams, and graph serialisations they kept as they are, still read)."""

from __future__ import annotations

import threading
import zlib

import zstandard

#: the first bytes of a Zstandard frame (a zlib stream starts with 0x78)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: zstd level 3 with 16 KB match tables (level 3's own are 192 KB for a 12 KB input, cleared
#: for every frame: in a mapping worker, whose caches the validators have just filled, that
#: cost more than the compression). Faster than zlib level 1 there, and smaller
#: (docs/benchmarks.md#record-store).
PAYLOAD_PARAMS = zstandard.ZstdCompressionParameters.from_level(3, hash_log=12, chain_log=12)
_codecs = threading.local()  # zstd (de)compression contexts are not shared between threads


def pack(data: bytes) -> bytes:
    """Payloads are kept zstd-compressed (large, rarely read): one Zstandard frame with the
    content size in its header."""
    compressor: zstandard.ZstdCompressor | None = getattr(_codecs, "compressor", None)
    if compressor is None:
        compressor = zstandard.ZstdCompressor(compression_params=PAYLOAD_PARAMS)
        _codecs.compressor = compressor
    return compressor.compress(data)


def unpack(data: bytes | None) -> bytes:
    """A packed payload: a Zstandard frame, or a zlib stream as stores before zstd kept them
    (told apart by their first bytes; payloads are content-addressed, so an old store keeps
    its zlib rows until they are purged)."""
    if not data:
        return b""
    if data[:4] == ZSTD_MAGIC:
        decompressor: zstandard.ZstdDecompressor | None = getattr(_codecs, "decompressor", None)
        if decompressor is None:
            decompressor = _codecs.decompressor = zstandard.ZstdDecompressor()
        return decompressor.decompress(data)
    return zlib.decompress(data)


#: zstd level 1 with the same small match tables: what a record's N-Triples shrink to, and
#: what it costs the mapping worker and each read, is in docs/benchmarks.md#issue-31-disk
GRAPH_PARAMS = zstandard.ZstdCompressionParameters.from_level(1, hash_log=12, chain_log=12)


def pack_graph(data: bytes) -> bytes:
    """Graph serialisations (canonical N-Triples) are kept as Zstandard frames: they were
    two thirds of the state database, kept as they are. Packed in the mapping worker
    (``jobs/processing.py``), so the store's process spends nothing on it; nothing stays
    nothing (a withdrawn record has no graph)."""
    if not data:
        return b""
    compressor: zstandard.ZstdCompressor | None = getattr(_codecs, "graph_compressor", None)
    if compressor is None:
        compressor = zstandard.ZstdCompressor(compression_params=GRAPH_PARAMS)
        _codecs.graph_compressor = compressor
    return compressor.compress(data)


def unpack_graph(data: bytes | None) -> bytes:
    """A kept graph serialisation: a Zstandard frame; N-Triples as they are (stores before
    issue 31: N-Triples never start with the frame's first byte, 0x28, nor with 0x78); or a
    zlib stream (older still)."""
    if not data:
        return b""
    if data[:4] == ZSTD_MAGIC or data[:1] == b"\x78":
        return unpack(data)
    return bytes(data)


#: a record's findings when it has none, kept as they are (the column's default)
NO_FINDINGS = "[]"


def pack_findings(findings_json: str) -> str | bytes:
    """A record's findings (a JSON list) as they are kept: a Zstandard frame, as payloads
    are. Most findings are recommendations every record of a source repeats (a licence's
    missing type, say): a fifth of the state database kept as text, a quarter of that packed
    (docs/benchmarks.md#the-1m-run-issue-31). None is kept as the text ``[]``."""
    if findings_json == NO_FINDINGS:
        return NO_FINDINGS
    return pack(findings_json.encode("utf-8"))


def unpack_findings(value: str | bytes | None) -> str:
    """A record's findings as a JSON list: packed, or text as stores before kept them."""
    if value is None:
        return NO_FINDINGS
    if isinstance(value, bytes):
        return unpack(value).decode("utf-8")
    return value
