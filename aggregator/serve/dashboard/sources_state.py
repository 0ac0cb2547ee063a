"""The sources as configured now: aggregator.toml is read again when it changed on disk, so a
source registered, edited or paused (from the dashboard or ``aggregator source ...``) shows
without restarting the server."""

from __future__ import annotations

import threading

from aggregator.config import Settings, SourceConfig, load_settings

_lock = threading.Lock()
_cache: dict[str, tuple[int, int, dict[str, SourceConfig]]] = {}


def current_settings(settings: Settings) -> Settings:
    """``settings`` with its sources as the configuration file has them now."""
    return settings.with_sources(configured_sources(settings))


def configured_sources(settings: Settings) -> dict[str, SourceConfig]:
    path = settings.config_path
    if path is None or not path.exists():
        return dict(settings.sources)
    stat = path.stat()
    key = str(path)
    with _lock:
        found = _cache.get(key)
        if found and found[0] == stat.st_mtime_ns and found[1] == stat.st_size:
            return found[2]
        sources = dict(load_settings(path).sources)
        _cache[key] = (stat.st_mtime_ns, stat.st_size, sources)
        return sources
