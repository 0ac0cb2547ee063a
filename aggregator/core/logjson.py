"""Structured logs: one JSON object per line (``aggregator --log-format json``).

Each line has ``time`` (UTC), ``level``, ``logger`` and ``message``, and, where known,
``job``, ``source``, ``record`` and ``stage``: from the log record's own fields (the event
log lines of :mod:`aggregator.core.events` carry them), else from :data:`job_context`, which
:func:`aggregator.jobs.pipeline.run_source` sets for the thread running a job (so a library's
warning during a job names the job and source too). An exception comes as ``exception``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType

FIELDS = ("job", "source", "record", "stage")

#: the job this thread is running: {"job": id, "source": name}
job_context: ContextVar[Mapping[str, object]] = ContextVar(
    "job_context", default=MappingProxyType({})
)


@contextmanager
def in_job(**fields: object) -> Iterator[None]:
    token = job_context.set({**job_context.get(), **fields})
    try:
        yield
    finally:
        job_context.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created, UTC)
        doc: dict[str, object] = {
            "time": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = job_context.get()
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is None:
                value = context.get(name)
            if value is not None:
                doc[name] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def use_json_logs(level: str) -> None:
    """Log JSON lines to stderr at ``level``, replacing the root handlers' format."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter())
    root.setLevel(level.upper())
