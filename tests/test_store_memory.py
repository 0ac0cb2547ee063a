"""What the graph applier gives back to the system after each bulk load
(``aggregator/store/applier.py``: glibc keeps what RocksDB's threads free in their arenas)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from aggregator.store.applier import release_free_memory

BLOCK = 4096  # under glibc's mmap threshold: the blocks come from the heap, not mmap
BLOCKS = 50_000  # ~200 MB


def _rss_mb() -> float:
    status = Path("/proc/self/status").read_text(encoding="ascii")
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert found is not None
    return int(found.group(1)) / 1024


@pytest.mark.skipif(release_free_memory is None, reason="not glibc: nothing to give back")
def test_memory_freed_inside_the_heap_goes_back_to_the_system() -> None:
    assert release_free_memory is not None
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(BLOCK) for _ in range(BLOCKS)]
    assert all(blocks)
    for block in blocks:
        ctypes.memset(block, 1, BLOCK)  # touched: resident
    top = max(blocks)  # stays: the blocks below it cannot go back by free() at the heap's top
    try:
        for block in blocks:
            if block != top:
                libc.free(block)
        held = _rss_mb()
        release_free_memory()
        assert _rss_mb() < held - 100  # the ~200 MB freed below it went back
    finally:
        libc.free(top)
