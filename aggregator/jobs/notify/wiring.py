"""Building the notifier of a configuration and attaching it to a bus."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from aggregator.config.notify import Condition
from aggregator.core.events import EventBus, default_bus
from aggregator.jobs.notify.notifier import Clock, Notifier, Translator, utc_now

if TYPE_CHECKING:
    from aggregator.config import Settings
    from aggregator.jobs.notify.policy import Digest

STATE_FILE = "notify-state.json"


def attach(settings: Settings, bus: EventBus, *, clock: Clock = utc_now) -> Notifier:
    """A notifier for ``settings`` (its ``[notify]`` section, plus the conditions and
    translators the sources' harvesters declare through ``notify_conditions(source)`` and
    ``notify_translator(settings, source)``), subscribed to ``bus``."""
    from aggregator.plugin import harvesters

    notify = settings.notify
    if notify.state_file is None:
        notify = replace(notify, state_file=settings.store_path / STATE_FILE)
    conditions: list[Condition] = []
    translators: list[Translator] = []
    for source in settings.sources.values():
        if source.type not in harvesters:
            continue
        cls = harvesters.get(source.type)
        declare = getattr(cls, "notify_conditions", None)
        if declare is not None:
            conditions.extend(declare(source))
        translator = getattr(cls, "notify_translator", None)
        if translator is not None:
            translators.append(translator(settings, source))
    # the sources' notification policies (notify/policy.py): rules, changes, digests
    from aggregator.jobs.notify.policy import DIGEST_FILE, Digest, change_translator, policy_rules

    notify = replace(notify, rules=(*notify.rules, *policy_rules(settings)))
    translators.append(change_translator(settings))
    notifier = Notifier(notify, clock=clock, conditions=conditions, translators=translators)
    notifier.attach(bus)
    digest = Digest(settings, notify, settings.store_path / DIGEST_FILE)
    for old in [d for d in _digests if d[0] is bus]:  # a re-read configuration replaces it
        old[2]()
        _digests.remove(old)
    if digest.kinds:
        _digests.append((bus, digest, bus.subscribe(digest.handle)))
        digest.flush(clock())  # the days that ended since the last process flushed
    return notifier


_digests: list[tuple[EventBus, Digest, Callable[[], None]]] = []


def flush_digests(clock: Clock = utc_now) -> int:
    """Send the policy digests of the days that ended (the scheduler calls this at each
    tick); return the mails sent."""
    return sum(d.flush(clock()) for _, d, _ in _digests)


_attached: list[tuple[int, Notifier, Callable[[], None]]] = []
_lock = threading.Lock()


def attach_default(settings: Settings) -> Notifier | None:
    """Attach the configuration's notifier to the process-wide bus (the CLI commands that
    write the store call this): once per configuration, replacing the notifier of an earlier
    one; None when nothing is configured."""
    with _lock:
        if _attached and _attached[0][0] == id(settings):
            return _attached[0][1]
        while _attached:
            _, old, unsubscribe = _attached.pop()
            unsubscribe()
            old.close()
        if not _configured(settings):
            return None
        bus = default_bus()
        notifier = attach(settings, bus)
        _attached.append((id(settings), notifier, notifier.detach))
        return notifier


def _configured(settings: Settings) -> bool:
    from aggregator.plugin import harvesters

    n = settings.notify
    policies = n.smtp is not None and any(s.notify != "never" for s in settings.sources.values())
    return (
        bool(n.rules or n.conditions)
        or policies
        or any(
            s.type in harvesters and hasattr(harvesters.get(s.type), "notify_conditions")
            for s in settings.sources.values()
        )
    )
