"""What the benchmark scripts measure alike, read from Linux ``/proc``: the CPU time of
processes and of this process's threads (by name), the RSS of a process group sampled while it
runs, and request latencies.

Kept flat in memory: samples are a few numbers every half second, never one per record.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def thread_times() -> dict[tuple[int, int], tuple[str, float]]:
    """{(thread id, start time): (name, CPU seconds)} of this process's live threads (the
    start time tells a thread from an earlier one that had its id). A Python thread goes
    by its Python name (3.11 gives the OS none: ``harvest-listing``, ``graph-applier``), the
    main thread as ``main``, a native one by its OS name (``rocksdb:low``); a trailing number
    is dropped (``ThreadPoolExecutor-0_1`` -> ``ThreadPoolExecutor``)."""
    out: dict[tuple[int, int], tuple[str, float]] = {}
    main = os.getpid()
    named = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        try:
            name = named.get(tid) or (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = "main" if tid == main else name.rstrip("0123456789:-_ ") or name
        out[tid, int(fields[19])] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def process_table() -> dict[int, tuple[int, float, int]]:
    """pid -> (parent pid, CPU seconds, RSS bytes) of every process now running."""
    stats: dict[int, tuple[int, float, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        stats[int(entry)] = (int(fields[1]), cpu, int(fields[21]) * PAGE)
    return stats


def process_cpu(pid: int) -> float:
    """CPU seconds one running process has used (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(root: int, table: dict[int, tuple[int, float, int]], exclude: set[int]) -> set[int]:
    """The processes below ``root`` (children, their children...), the subtrees of the
    ``exclude`` pids left out."""
    mine = {root}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _, _) in table.items():
            if ppid in mine and pid not in mine and pid not in exclude:
                mine.add(pid)
                changed = True
    return mine - {root}


class GroupSampler(threading.Thread):
    """Every ``interval`` s: the RSS of this process plus its descendants (the mapping
    workers, the forkserver), the ``exclude`` subtrees (the peers, which stand for remote
    servers) left out; the CPU seconds last seen of each descendant (RUSAGE_CHILDREN never
    sees the forkserver's workers); the CPU of this process's threads by name. ``mark()``
    starts a new phase: its samples are kept apart, as (seconds into the phase, MB)."""

    def __init__(self, exclude: Iterable[int] = (), interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="bench-sampler")  # its CPU: the measuring's
        self.exclude = set(exclude)
        self.interval = interval
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.peak_mb = 0.0
        self.phase: list[tuple[float, float]] = []
        self.phase_t0 = time.monotonic()
        self.children_cpu: dict[int, float] = {}  # pid -> CPU seconds last seen
        self.threads: dict[tuple[int, int], tuple[str, float]] = {}  # -> (name, CPU) last seen

    def sample(self) -> None:
        me = os.getpid()
        table = process_table()
        group = descendants(me, table, self.exclude)
        rss = sum(table[p][2] for p in group | {me} if p in table) / 2**20
        threads = thread_times()
        with self.lock:
            for pid in group:
                self.children_cpu[pid] = table[pid][1]
            self.threads.update(threads)
            self.peak_mb = max(self.peak_mb, rss)
            self.phase.append((time.monotonic() - self.phase_t0, rss))

    def mark(self) -> list[tuple[float, float]]:
        """Start a phase; return the samples of the one that ends."""
        self.sample()
        with self.lock:
            done, self.phase = self.phase, []
            self.phase_t0 = time.monotonic()
        return done

    def children_cpu_total(self) -> float:
        self.sample()
        with self.lock:
            return sum(self.children_cpu.values())

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds by thread name, over every thread of this process seen so far."""
        self.sample()
        by_name: dict[str, float] = {}
        with self.lock:
            for name, cpu in self.threads.values():
                by_name[name] = by_name.get(name, 0.0) + cpu
        return by_name

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sample()


def at_shares(samples: list[tuple[float, float]], shares: Iterable[float]) -> list[float]:
    """The sample (MB) taken at or just before each share of the phase's duration."""
    if not samples:
        return []
    end = samples[-1][0]
    out = []
    for share in shares:
        chosen = samples[0][1]
        for t, mb in samples:
            if t <= share * end:
                chosen = mb
        out.append(round(chosen))
    return out


def latencies(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    """p50, p90 and max of ``repeats`` calls, in milliseconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p90_ms": round(times[max(0, int(len(times) * 0.9) - 1)], 2),
        "max_ms": round(times[-1], 2),
    }
