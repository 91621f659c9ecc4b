"""The Prometheus endpoint, started with the broker and stopped with it, served in the broker's
own loop (:mod:`plugins.metrics.http`). A scrape takes its copy of the counts and the store's
positions on the loop, one consistent moment with no lock on the data path, and renders the
copy in a worker thread."""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio
from prometheus_client import CollectorRegistry

from kernel.consumer_progress import CONSUMER_PROGRESS, POP_PROGRESS, ConsumerProgress, PopProgress
from kernel.context import BrokerRuntime
from kernel.latency import latency_fields
from kernel.outcomes import RecoveryReport
from kernel.protocols import MessageStore
from plugins.metrics.http import metrics_app, serve_metrics
from plugins.metrics.meters import BrokerMeters, ConsumerLag, GaugeSnapshot, Snapshot
from wire.remoting.metering import RequestMeters

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class MetricsExporter:
    runtime: BrokerRuntime
    meters: BrokerMeters
    host: str
    port: int
    serve: bool = True
    recovery: RecoveryReport | None = None
    """What the start's recovery found, once the store reported it."""
    requests: RequestMeters | None = None
    """The request meters of this process's servers (broker port, NameServer)."""

    @property
    def counting_from(self) -> int:
        """The log offset from which records are this process's sends: the log's end at
        recovery (records re-dispatched after a crash were counted when they were written)."""
        return self.recovery.log_max_offset if self.recovery is not None else 0

    url: str = ""

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        if not self.serve:
            task_status.started()
            await trio.sleep_forever()
        async with trio.open_nursery() as nursery:
            base = await nursery.start(serve_metrics, metrics_app(self._registry_now), self.host, self.port)
            self.port = urlsplit(base).port or self.port
            self.url = f"{base.rstrip('/')}/metrics"
            log.info("metrics: Prometheus endpoint at %s", self.url)
            task_status.started()

    def _registry_now(self) -> CollectorRegistry:
        """On the loop: a registry holding a copy of every count now."""
        return self.meters.registry_of(self.snapshot())

    def snapshot(self) -> Snapshot:
        """On the broker's loop: every count, and the store's positions now."""
        requests = {meter.server: meter.figures() for meter in self.requests or ()}
        is_broker = "broker" in self.runtime.ctx.config.broker.roles
        return self.meters.snapshot(self.gauges() if is_broker else None, requests)

    def gauges(self) -> GaugeSnapshot:
        marks = self.runtime.store.watermarks()
        progress = self.runtime.ctx.stash.get(CONSUMER_PROGRESS, None)
        popping = self.runtime.ctx.stash.get(POP_PROGRESS, None)
        statistics = self.runtime.statistics()
        dispatch = statistics.dispatch
        report = self.recovery
        return GaugeSnapshot(
            storage_size=max(0, marks.wrote - marks.min_offset),
            flush_behind=max(0, marks.wrote - marks.flushed),
            dispatch_behind=dispatch.behind_bytes if dispatch is not None else 0,
            recovery_scanned=report.records_scanned if report is not None else 0,
            recovery_truncated=report.truncated_bytes if report is not None else 0,
            recovery_clean=report.clean_shutdown if report is not None else None,
            lag=consumer_lag(self.runtime.store, progress, popping) if progress is not None else {},
            pop_counts=dict(popping.counts()) if popping is not None else {},
            flush_latency=latency_fields(statistics.flush),
            replication_latency=latency_fields(statistics.replicator),
        )


def consumer_lag(
    store: MessageStore, progress: ConsumerProgress, popping: PopProgress | None = None
) -> dict[tuple[str, str], ConsumerLag]:
    """(topic, group) → messages behind, age in ms of the oldest unconsumed message, and
    messages in flight (pulled and not committed, or popped and not acked), summed over the
    queues as ``consumerProgress`` shows them (the age is the oldest queue's)."""
    now = int(time.time() * 1000)
    stored_at = getattr(store, "store_time", None)  # a store without lookups shows no age
    out: dict[tuple[str, str], ConsumerLag] = {}
    for queue in progress.queues():
        behind = max(0, store.max_queue_offset(queue.topic, queue.queue_id) - queue.committed)
        age = 0
        if behind and stored_at is not None:
            stamp = stored_at(queue.topic, queue.queue_id, queue.committed)
            age = max(0, now - stamp) if stamp > 0 else 0
        flying = queue.in_flight
        if popping is not None:
            flying += popping.in_flight(queue.group, queue.topic, queue.queue_id)
        before = out.get((queue.topic, queue.group))
        if before is None:
            out[(queue.topic, queue.group)] = ConsumerLag(behind, age, flying)
        else:
            out[(queue.topic, queue.group)] = ConsumerLag(
                before.messages + behind, max(before.age_ms, age), before.in_flight + flying
            )
    return out
