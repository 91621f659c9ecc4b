"""metrics plugin: RocketMQ 5's Prometheus metrics (``metricsExporterType=PROM``) on
``metricsPromExporterHost:metricsPromExporterPort`` (default 127.0.0.1:5557).

Hooks:

- ``trocket_records_dispatched``: messages, bytes and sizes stored, per topic (once per
  dispatch batch, on its columns: the put path does nothing for metrics);
- ``trocket_messages_pulled``: messages and bytes pulled, per topic and group (once per pull);
- ``trocket_dead_lettered``: messages moved to a dead-letter queue, per topic and group;
- ``trocket_store_recovered``: what the start's recovery found;
- ``trocket_register_services``: the endpoint (:class:`~plugins.metrics.exporter.MetricsExporter`),
  in broker and NameServer processes, and the request meters the routers of both count into;
- ``trocket_runtime_figures``: ``metricsUrl`` in ``brokerStatus``.

Every metric and its labels: ``docs/metrics.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel import ConfigSection, Phase, ServiceSpec, hookimpl
from kernel.context import REQUEST_METERS, BrokerContext, BrokerRuntime, StashKey
from kernel.model import BrokerRole, DispatchRecord
from kernel.outcomes import RecoveryReport
from plugins.metrics.config import PROPERTIES, MetricsConfig
from plugins.metrics.exporter import MetricsExporter
from plugins.metrics.meters import BrokerMeters
from wire.remoting.metering import RequestMeters

__all__ = ["EXPORTER", "METERS", "MetricsConfig"]

METERS = StashKey[BrokerMeters]("metrics.meters")
EXPORTER = StashKey[MetricsExporter]("metrics.exporter")
RECOVERY = StashKey[RecoveryReport]("metrics.recovery")
"""The start's recovery report, kept for the exporter (recovery runs before services start)."""


def _meters(ctx: BrokerContext) -> BrokerMeters:
    meters = ctx.stash.get(METERS, None)
    if meters is None:
        meters = BrokerMeters(ctx.broker.cluster_name, ctx.broker.broker_name)
        ctx.stash[METERS] = meters
    return meters


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("metrics", MetricsConfig, PROPERTIES)]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    # Before any service is made: the routers of the broker's port and the NameServer, built
    # when their services start, find the meters here and count their requests into them.
    requests = ctx.stash[REQUEST_METERS] = RequestMeters()

    def make(runtime: BrokerRuntime) -> MetricsExporter:
        config = runtime.ctx.plugin_config(MetricsConfig)
        exporter = MetricsExporter(
            runtime,
            _meters(runtime.ctx),
            config.prom_exporter_host,
            config.prom_exporter_port,
            serve=config.exporter_type == "PROM",
            recovery=runtime.ctx.stash.get(RECOVERY, None),
            requests=requests,
        )
        runtime.ctx.stash[EXPORTER] = exporter
        return exporter

    return [ServiceSpec("metrics-exporter", Phase.DURABILITY, make, roles=frozenset({"broker", "namesrv"}))]


@hookimpl
def trocket_store_recovered(report: RecoveryReport, ctx: BrokerContext) -> None:
    ctx.stash[RECOVERY] = report
    exporter = ctx.stash.get(EXPORTER, None)
    if exporter is not None:
        exporter.recovery = report


@hookimpl
def trocket_records_dispatched(records: Sequence[DispatchRecord], ctx: BrokerContext) -> None:
    exporter = ctx.stash.get(EXPORTER, None)
    if exporter is None or exporter.runtime.role is BrokerRole.SLAVE:
        return  # a slave's records are its master's sends, counted there
    _meters(ctx).stored(records, exporter.counting_from)


@hookimpl
def trocket_messages_pulled(topic: str, group: str, count: int, size: int, ctx: BrokerContext) -> None:
    _meters(ctx).pulled(topic, group, count, size)


@hookimpl
def trocket_dead_lettered(message: DispatchRecord, group: str, reason: str, ctx: BrokerContext) -> None:
    _meters(ctx).dead_lettered(message.topic, group)


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    exporter = ctx.stash.get(EXPORTER, None)
    return {"metricsUrl": exporter.url} if exporter is not None and exporter.url else {}
