"""Notifications: configured actions for events, escalation of lasting error conditions.

A general mechanism on the harvest event bus (:mod:`aggregator.core.events`), shared by every
source type: the harvest's own events (``JobFailed``, ``SourceUnreachable``,
``JobRecovered``, ``JobFinished:failed`` ...) and named :class:`Notice` events of monitors
and protocols (the MDR status monitor's ``MDR_SERVICE_DOWN`` ...) go through the same rules.

The API, all of it::

    notifier = Notifier(settings.notify, clock=..., conditions=[...], translators=[...])
    unsubscribe = notifier.attach(bus)     # hear every event of the bus
    bus.emit(Notice(source="portal", kind="MDR_SERVICE_DOWN", message="..."))
    notifier.tick()                        # escalate conditions that lasted (periodically)

    attach(settings, bus)                  # the above, from aggregator.toml, plus the
                                           # conditions and translators harvesters declare

* :class:`Rule` (``[[notify.rules]]``): events of these *kinds* (class name, Notice kind,
  ``JobFinished:<status>``), from these sources or any, run these actions: ``log_file``,
  ``console``, ``syslog``, ``email`` (or the MDC specification's ``LOG2FILE``,
  ``LOG2CONSOLE``, ``LOG2SYSLOG``, ``SEND_NOTIFICATION``). E-mail goes to roles (``admin``,
  ``escalation``: the operators; ``site_admin``, ``site_escalation``: the source's own
  contacts from ``[notify.sites.NAME]``) or literal addresses; by default an escalation goes
  to the escalation addresses, anything else to the admins.
* :class:`Condition` (``[[notify.conditions]]``, or given by code): opened per source by a
  ``raise_on`` kind, closed by a ``clear_on`` kind; lasting ``escalate_after`` it emits its
  ``escalation`` Notice (level ``escalation``) once; clearing emits its ``recovery`` Notice.
  Open conditions survive restarts in ``[notify] state_file`` (default
  ``<store>/notify-state.json``).
* Translators derive events from events (a harvester's
  ``notify_translator(settings, source)``: the MDR harvester turns a failed job of an MDR
  source into ``MD_REPL_FAILED``); a harvester's ``notify_conditions(source)`` adds its
  conditions (``DOWN_TIME_ESCLTN``).
* E-mail is sent with :mod:`smtplib` (:class:`Mailer`); the SMTP password comes from the
  environment variable ``[notify.smtp] password_env`` names, and is never logged.

A failing action is logged and skipped; derived events are emitted on the bus after the event
that caused them, so every subscriber hears them in order.
"""

from __future__ import annotations

from aggregator.config.notify import (
    Condition,
    Contacts,
    NotifySettings,
    Rule,
    SmtpSettings,
    parse_notify,
)
from aggregator.core.notices import Notice, event_kinds, kind_of, level_of
from aggregator.jobs.notify.conditions import ConditionTracker, Transition
from aggregator.jobs.notify.mailer import Mailer, MailError
from aggregator.jobs.notify.notifier import Clock, Notifier, Translator, utc_now
from aggregator.jobs.notify.wiring import attach, attach_default

__all__ = [
    "Clock",
    "Condition",
    "ConditionTracker",
    "Contacts",
    "MailError",
    "Mailer",
    "Notice",
    "Notifier",
    "NotifySettings",
    "Rule",
    "SmtpSettings",
    "Transition",
    "Translator",
    "attach",
    "attach_default",
    "event_kinds",
    "kind_of",
    "level_of",
    "parse_notify",
    "utc_now",
]
