"""``[metrics]``: where the Prometheus endpoint listens (RocketMQ 5's ``metricsExporterType``,
``metricsPromExporterHost`` and ``metricsPromExporterPort``)."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq
from kernel.config.property_aliases import PropertyAlias


@attrs.frozen(kw_only=True)
class MetricsConfig:
    exporter_type: str = fields.choice("PROM", ("PROM", "DISABLE"))
    """``PROM`` serves the endpoint; ``DISABLE`` keeps counting but serves nothing."""
    prom_exporter_host: str = fields.string("127.0.0.1")
    """Loopback by default: metrics name topics and groups."""
    prom_exporter_port: int = fields.integer(5557, minimum=0, maximum=65535)
    """RocketMQ 5's default; 0 picks a free port (shown as ``metricsUrl`` in brokerStatus)."""


PROPERTIES = {
    "metricsExporterType": PropertyAlias("exporter_type", rocketmq.text, "PROM or DISABLE"),
    "metricsPromExporterHost": PropertyAlias("prom_exporter_host", rocketmq.text, "an address"),
    "metricsPromExporterPort": rocketmq.integer_alias("prom_exporter_port", "a TCP port"),
}
