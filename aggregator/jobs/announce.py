"""The events a job announces on the bus: one per rejected record while it runs, and the
closing ones (SourceUnreachable, JobFailed, JobRecovered, JobFinished) when it ends."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aggregator.core.errors import TransportError
from aggregator.core.events import (
    EventBus,
    JobFailed,
    JobFinished,
    JobRecovered,
    RecordRejected,
    SourceUnreachable,
)
from aggregator.core.models import Finding, JobStatus, Severity
from aggregator.store.journal import JobRow


def rejection_emitter(
    bus: EventBus, source: str, job_id: int
) -> Callable[[str, Sequence[Finding]], None]:
    """A callback for the lifecycle's rejections: one RecordRejected per rejected record,
    with its first violation."""

    def rejected(local_id: str, findings: Sequence[Finding]) -> None:
        first = next((f for f in findings if f.severity is Severity.VIOLATION), None)
        if first is not None:
            bus.emit(
                RecordRejected(
                    source=source,
                    job_id=job_id,
                    local_id=local_id,
                    step=first.step or first.stage.value,
                    rule=first.rule,
                    message=first.message,
                    location=first.location or first.path,
                )
            )

    return rejected


def emit_closing(
    bus: EventBus,
    job: JobRow,
    url: str,
    unreachable: TransportError | None,
    previous: JobRow | None,
) -> None:
    """The events of a finished job (SourceUnreachable, JobFailed, JobRecovered, JobFinished).

    ``previous``: the source's job before this one, if any (a recovery is a success after a
    failure); ``unreachable``: the transport error the job failed on, if it did."""
    source, job_id = job.source, job.id
    if unreachable is not None:
        bus.emit(
            SourceUnreachable(
                source=source,
                job_id=job_id,
                url=unreachable.url or url,
                message=unreachable.message,
                status=unreachable.status,
            )
        )
    if job.status == JobStatus.FAILED.value:
        bus.emit(JobFailed(source=source, job_id=job_id, message=job.message))
    elif job.status == JobStatus.SUCCEEDED.value and (
        previous is not None and previous.status == JobStatus.FAILED.value
    ):
        bus.emit(JobRecovered(source=source, job_id=job_id, failed_job_id=previous.id))
    bus.emit(
        JobFinished(
            source=source,
            job_id=job_id,
            status=job.status,
            counters=dict(job.counters),
            message=job.message,
        )
    )
