"""The broker's metrics, under RocketMQ 5's names and labels, in a registry of their own (one
per broker, so brokers sharing a process do not mix their counts).

Counters move on the broker's event loop, once per put batch or pull answer; the gauges are
read when Prometheus scrapes, from a snapshot taken on the loop (the exporter thread never reads
the store's state while the loop changes it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import attrs
import numpy as np
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0)
"""RocketMQ 5's ``rocketmq_message_size`` buckets: 1 KiB to 4 MiB."""
NODE_LABELS = ("cluster", "node_type", "node_id")


@attrs.frozen
class GaugeSnapshot:
    """What the scrape-time gauges show, taken on the broker's loop."""

    storage_size: int
    flush_behind: int
    dispatch_behind: int
    recovery_scanned: int
    recovery_truncated: int
    recovery_clean: bool | None


@attrs.define(eq=False)
class BrokerMeters:
    cluster: str
    node_id: str
    registry: CollectorRegistry = attrs.field(factory=CollectorRegistry)
    messages_in: Counter = attrs.field(init=False)
    throughput_in: Counter = attrs.field(init=False)
    message_size: SizeHistogram = attrs.field(init=False)
    messages_out: Counter = attrs.field(init=False)
    throughput_out: Counter = attrs.field(init=False)
    send_to_dlq: Counter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        topic = (*NODE_LABELS, "topic")
        group = (*topic, "consumer_group")
        registry = self.registry
        self.messages_in = Counter(
            "rocketmq_messages_in", "Messages stored by producers' sends.", topic, registry=registry
        )
        self.throughput_in = Counter(
            "rocketmq_throughput_in", "Bytes of messages stored by sends.", topic, registry=registry
        )
        self.message_size = SizeHistogram(topic)
        registry.register(self.message_size)
        self.messages_out = Counter(
            "rocketmq_messages_out", "Messages consumers pulled.", group, registry=registry
        )
        self.throughput_out = Counter(
            "rocketmq_throughput_out", "Bytes of messages consumers pulled.", group, registry=registry
        )
        self.send_to_dlq = Counter(
            "rocketmq_send_to_dlq_messages",  # topic: the message's topic when it was sent back
            "Messages moved to a dead-letter queue.",
            group,
            registry=registry,
        )

    def _node(self) -> tuple[str, str, str]:
        return self.cluster, "broker", self.node_id

    def stored(self, topic: str, sizes: Sequence[int]) -> None:
        """One put batch of ``topic``: its record sizes, counted in bulk."""
        labels = (*self._node(), topic)
        sizes_array = np.asarray(sizes, dtype=np.int64)
        total = int(sizes_array.sum())
        self.messages_in.labels(*labels).inc(len(sizes_array))
        self.throughput_in.labels(*labels).inc(total)
        self.message_size.observe_all(labels, sizes_array, total)

    def pulled(self, topic: str, group: str, count: int, size: int) -> None:
        labels = (*self._node(), topic, group)
        self.messages_out.labels(*labels).inc(count)
        self.throughput_out.labels(*labels).inc(size)

    def dead_lettered(self, topic: str, group: str) -> None:
        self.send_to_dlq.labels(*self._node(), topic, group).inc()

    def add_gauges(self, snapshot: Callable[[], GaugeSnapshot | None]) -> None:
        self.registry.register(_StorageGauges(self._node(), snapshot))


_BOUNDS = np.asarray(MESSAGE_SIZE_BUCKETS)


class SizeHistogram(Collector):
    """``rocketmq_message_size``: counts per bucket kept as numpy arrays, so a batch of any
    size is one ``searchsorted`` and one ``bincount`` (``prometheus_client``'s Histogram
    observes one value per call)."""

    def __init__(self, label_names: tuple[str, ...]) -> None:
        self.label_names = label_names
        self._counts: dict[tuple[str, ...], np.ndarray] = {}
        self._sums: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()  # the exporter thread reads while the loop counts

    def observe_all(self, labels: tuple[str, ...], sizes: np.ndarray, total: int) -> None:
        per_bucket = np.bincount(np.searchsorted(_BOUNDS, sizes, side="left"), minlength=len(_BOUNDS) + 1)
        with self._lock:
            counts = self._counts.get(labels)
            if counts is None:
                self._counts[labels] = per_bucket.astype(np.int64)
                self._sums[labels] = total
            else:
                counts += per_bucket
                self._sums[labels] += total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "rocketmq_message_size", "Stored message sizes in bytes.", labels=self.label_names
        )
        with self._lock:
            rows = [
                (labels, np.cumsum(counts).tolist(), self._sums[labels])
                for labels, counts in self._counts.items()
            ]
        for labels, cumulative, total in rows:
            bounds = [*(repr(float(b)) for b in MESSAGE_SIZE_BUCKETS), "+Inf"]
            family.add_metric(list(labels), list(zip(bounds, cumulative, strict=True)), total)
        yield family


@attrs.define(eq=False)
class _StorageGauges(Collector):
    node: tuple[str, str, str]
    snapshot: Callable[[], GaugeSnapshot | None]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        taken = self.snapshot()
        if taken is None:
            return
        values = (
            (
                "rocketmq_storage_size",
                "Commit log bytes held (oldest file to the write position).",
                taken.storage_size,
            ),
            ("rocketmq_storage_flush_behind_bytes", "Bytes written but not yet flushed.", taken.flush_behind),
            (
                "rocketmq_storage_dispatch_behind_bytes",
                "Bytes written but not yet dispatched.",
                taken.dispatch_behind,
            ),
            (
                "trocket_recovery_records_scanned",
                "Records the last start's recovery scanned.",
                taken.recovery_scanned,
            ),
            (
                "trocket_recovery_truncated_bytes",
                "Bytes the last start's recovery cut off.",
                taken.recovery_truncated,
            ),
        )
        for name, documentation, value in values:
            family = GaugeMetricFamily(name, documentation, labels=NODE_LABELS)
            family.add_metric(self.node, value)
            yield family
        if taken.recovery_clean is not None:
            family = GaugeMetricFamily(
                "trocket_recovery_clean_shutdown",
                "1 when the last start found a clean shutdown.",
                labels=NODE_LABELS,
            )
            family.add_metric(self.node, 1 if taken.recovery_clean else 0)
            yield family
