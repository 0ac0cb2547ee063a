"""How the state database keeps bytes: payloads as Zstandard frames (older stores' zlib
streams still read), graph serialisations as they are."""

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


def pack_graph(data: bytes) -> bytes:
    """Graph serialisations are kept as they are: read on every serve, and compressing them
    cost more CPU per record than anything else in the store's process."""
    return data


def unpack_graph(data: bytes | None) -> bytes:
    if not data:
        return b""
    if data[:1] == b"\x78":  # a zlib stream from an older store (N-Triples never start so)
        return zlib.decompress(data)
    return bytes(data)
