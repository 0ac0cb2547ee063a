"""``aggregator mdc-monitor``: the MDC status monitor of the MDR sources."""

from __future__ import annotations

import sys

import click

from aggregator.cli.context import Ctx, pass_ctx
from aggregator.core.events import EventBus, HarvestEvent


@click.command("mdc-monitor")
@click.option("--once", is_flag=True, help="Check every MDR source once and exit.")
@click.option(
    "--every",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Minutes between checks [default: the sources' shortest status_period_minutes].",
)
@pass_ctx
def mdc_monitor(c: Ctx, once: bool, every: float | None) -> None:
    """Check getStatus of every MDR source periodically; run the [notify] rules for the MDC
    events (MDR_SERVICE_DOWN, CMS_DOWN, DB_DOWN, DOWN_TIME_ESCLTN, MDR_SRV_RECOVERED).

    Exits (with --once) 0 when every service is up, 1 when one is down."""
    from aggregator.harvest.mdr.monitor import mdr_sources, run_monitor
    from aggregator.jobs.notify import attach, kind_of

    settings = c.settings
    if not mdr_sources(settings):
        click.echo("no enabled mdr sources in the configuration", err=True)
        sys.exit(2)
    bus = EventBus()

    def show(event: HarvestEvent) -> None:
        click.echo(f"{event.source}: {kind_of(event)} {getattr(event, 'message', '')}")

    bus.subscribe(show)
    notifier = attach(settings, bus)
    try:
        down = run_monitor(settings, bus, once=once, every=every, tick=notifier.tick)
    except KeyboardInterrupt:
        down = 0
    finally:
        notifier.detach()
        notifier.close()
    sys.exit(1 if down else 0)
