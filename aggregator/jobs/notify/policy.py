"""Per-source notification policy, on the notifier's rules (no mechanism of its own).

Each source says when its contacts (``[notify.sites.NAME]``) and the operators
(``[notify] admin_email``) hear of its jobs, by e-mail (and, as always, the log)::

    [sources.portal]
    notify = "on-error"            # never (default) | on-error | always | on-error-or-change
    notify_digest = false          # true: one mail per source per day instead of one per event

- ``on-error``: a failed job (``JobFailed``), and the recovery when a job succeeds again
  (``JobRecovered``);
- ``always``: every finished job (``JobFinished``, whatever its status);
- ``on-error-or-change``: as ``on-error``, plus ``SOURCE_CHANGED``, a :class:`Notice` derived
  from a finished job that added, updated or withdrew records.

:func:`policy_rules` turns the policies into :class:`~aggregator.config.notify.Rule` s the
notifier runs like configured ones; :func:`change_notices` is the translator deriving
``SOURCE_CHANGED`` (:func:`change_translator`: only for the sources whose policy names it). A
digest source's events go to :class:`Digest` instead, which keeps them
in ``<store>/notify-digest.json`` (so a short CLI harvest's events wait for the next process)
and sends one mail per source and day once the day is over (:meth:`Digest.flush`, called when
the notifier is attached and at every scheduler tick).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from aggregator.config.notify import POLICIES, NotifySettings, Rule
from aggregator.core.events import HarvestEvent, JobFinished
from aggregator.core.notices import Notice, describe, event_kinds
from aggregator.jobs.notify.actions import recipients
from aggregator.jobs.notify.mailer import Mailer

if TYPE_CHECKING:
    from aggregator.config import Settings

log = logging.getLogger("aggregator.notify")  # the name operators filter on

RECIPIENTS = ("site_admin", "admin")
CHANGES = ("added", "updated", "withdrawn")
DIGEST_FILE = "notify-digest.json"


def policy_rules(settings: Settings) -> tuple[Rule, ...]:
    """One e-mail rule per source with a policy and no digest."""
    return tuple(
        Rule(events=POLICIES[src.notify], actions=("email",), sources=(name,), to=RECIPIENTS)
        for name, src in settings.sources.items()
        if POLICIES[src.notify] and not src.notify_digest
    )


def change_translator(settings: Settings) -> Callable[[HarvestEvent], Sequence[HarvestEvent]]:
    """The translator deriving ``SOURCE_CHANGED`` for the sources whose policy asks for it
    (no other source's jobs emit it)."""
    wanted = {n for n, s in settings.sources.items() if "SOURCE_CHANGED" in POLICIES[s.notify]}

    def translate(event: HarvestEvent) -> Sequence[HarvestEvent]:
        return change_notices(event) if event.source in wanted else ()

    return translate


def change_notices(event: HarvestEvent) -> Sequence[HarvestEvent]:
    """``SOURCE_CHANGED`` after a job that changed the source's records."""
    if not isinstance(event, JobFinished) or event.status == "failed":
        return ()
    changed = {k: int(event.counters.get(k, 0)) for k in CHANGES if event.counters.get(k)}
    if not changed:
        return ()
    counts = ", ".join(f"{n} {k}" for k, n in changed.items())
    return (
        Notice(
            source=event.source,
            at=event.at,
            job_id=event.job_id,
            kind="SOURCE_CHANGED",
            level="info",
            message=f"job {event.job_id} changed the source's records: {counts}",
            details={k: str(n) for k, n in changed.items()},
        ),
    )


class Digest:
    """Events of digest sources, kept per source and day; one mail each once the day ends."""

    def __init__(self, settings: Settings, notify: NotifySettings, path: Path) -> None:
        self.kinds = {
            name: POLICIES[src.notify]
            for name, src in settings.sources.items()
            if src.notify_digest and POLICIES[src.notify]
        }
        self.notify = notify
        self.path = path
        self.mailer = Mailer(notify.smtp) if notify.smtp else None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, dict[str, list[str]]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.error("notification digest %s unreadable (%s): started afresh", self.path, err)
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, data: dict[str, dict[str, list[str]]]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def handle(self, event: HarvestEvent) -> None:
        kinds = self.kinds.get(event.source)
        if not kinds or not set(event_kinds(event)) & set(kinds):
            return
        at = event.at.astimezone(UTC)
        with self._lock:
            data = self._load()
            day = data.setdefault(event.source, {}).setdefault(at.date().isoformat(), [])
            day.append(f"{at.strftime('%H:%M:%S')}Z {describe(event)}")
            self._save(data)

    def flush(self, now: datetime) -> int:
        """Mail every finished day's digest (days before ``now``'s); return mails sent. A
        mail that fails stays for the next flush."""
        today = now.astimezone(UTC).date()
        sent = 0
        with self._lock:
            data = self._load()
            for source, days in sorted(data.items()):
                for day, lines in sorted(days.items()):
                    if date.fromisoformat(day) >= today or not lines:
                        continue
                    if self._send(source, day, lines):
                        del days[day]
                        sent += 1
            data = {s: d for s, d in data.items() if d}
            if data or self.path.exists():
                self._save(data)
        return sent

    def _send(self, source: str, day: str, lines: list[str]) -> bool:
        if self.mailer is None:
            return True  # nowhere to send: the log told them already
        probe = Notice(source=source, kind="DIGEST", message="", level="info")
        to = recipients(self.notify, probe, RECIPIENTS)
        if not to:
            log.warning("digest of %s: no e-mail recipients configured", source)
            return True
        subject = f"[aggregator] {source}: {len(lines)} event(s) on {day}"
        body = f"Events of source {source} on {day} (UTC):\n\n" + "\n".join(lines) + "\n"
        try:
            self.mailer.send(to, subject, body)
        except Exception as err:
            log.warning("digest of %s for %s not sent (kept): %s", source, day, err)
            return False
        return True
