"""The broker's metrics, under RocketMQ 5's names and labels, in a registry of their own (one
per broker, so brokers sharing a process do not mix their counts).

Messages in are counted where the log is read anyway, from the dispatch batches' columns (one
batch covers every record written since the last, however many puts made them): a batch's
columns are kept, and all kept batches are counted at once at the next scrape (or every 64k
records); the put path itself does nothing for metrics. Pulls and dead letters update a dictionary each. The
counts are plain Python numbers only the broker's event loop touches; a scrape copies them on
the loop (:meth:`BrokerMeters.snapshot`) and renders the copy in a worker thread: no lock on
the data path, and a scrape shows one consistent moment.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence

import attrs
import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from kernel.latency import LatencySnapshot
from kernel.model import DispatchRecord
from wire.dispatch_batch import DispatchBatch
from wire.remoting.metering import RPC_LATENCY_BOUNDS_MS, RequestFigures

MESSAGE_SIZE_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
"""RocketMQ 5's ``rocketmq_message_size`` buckets: 1 KiB to 4 MiB (and +Inf)."""
_BOUNDS = np.asarray(MESSAGE_SIZE_BUCKETS)


def _bucket_of(size: int) -> int:
    return bisect.bisect_left(MESSAGE_SIZE_BUCKETS, size)


FOLD_ROWS = 1 << 16
FOLD_BATCHES = 4096
"""Dispatch batches wait to be counted until a scrape, or until this many records or batches
are pending (memory stays bounded when nobody scrapes)."""

NODE_LABELS = ("cluster", "node_type", "node_id")
_IN_COUNT, _IN_BYTES, _FIRST_BUCKET = 0, 1, 2


POP_COUNTERS = (
    ("popped", "Messages delivered by POP since start."),
    ("acked", "POP messages acknowledged since start."),
    ("revived", "POP messages delivered again after their invisible time since start."),
    ("dead_lettered", "POP messages moved to the dead-letter queue since start."),
)
"""``trocket_pop_*_total`` counters (Trocket's own: RocketMQ 5 counts POP in its own metrics)."""


@attrs.frozen
class GaugeSnapshot:
    """What the scrape-time gauges show, read on the broker's loop."""

    storage_size: int
    flush_behind: int
    dispatch_behind: int
    recovery_scanned: int
    recovery_truncated: int
    recovery_clean: bool | None
    lag: dict[tuple[str, str], ConsumerLag] = attrs.field(factory=dict)
    """(topic, group) → how far the group is behind."""
    flush_latency: dict[str, LatencySnapshot] = attrs.field(factory=dict)
    """The flush policy's histograms (``flush_latency``), by field name."""
    replication_latency: dict[str, LatencySnapshot] = attrs.field(factory=dict)
    """The replicator's histograms (``replication_latency``), by field name."""
    pop_counts: dict[str, int] = attrs.field(factory=dict)
    """POP counters since start (``kernel.consumer_progress.PopProgress``); empty without POP."""


@attrs.frozen
class ConsumerLag:
    """One (topic, group)'s lag, summed over its queues."""

    messages: int
    """Stored and not yet committed."""
    age_ms: int
    """Milliseconds since the oldest uncommitted message was stored."""
    in_flight: int
    """Pulled and not yet committed."""


@attrs.frozen
class Snapshot:
    """One consistent copy of every count, taken on the loop for a scrape."""

    stored: dict[str, list[int]]
    pulled: dict[tuple[str, str], list[int]]
    dead_lettered: dict[tuple[str, str], int]
    gauges: GaugeSnapshot | None
    """None in a process without a broker (a NameServer alone)."""
    requests: dict[str, list[RequestFigures]] = attrs.field(factory=dict)
    """Server (``broker``, ``nameserver``) → its requests' figures."""


@attrs.define(eq=False)
class BrokerMeters:
    cluster: str
    node_id: str
    _stored: dict[str, list[int]] = attrs.field(factory=dict, init=False)
    """topic → [messages, bytes, count per size bucket...]."""
    _pulled: dict[tuple[str, str], list[int]] = attrs.field(factory=dict, init=False)
    """(topic, group) → [messages, bytes]."""
    _dead_lettered: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False)
    _pending: list[tuple[list[str], np.ndarray, np.ndarray]] = attrs.field(factory=list, init=False)
    """Dispatch batches' (topics, topic index, size) columns not yet counted (see :meth:`_fold`)."""
    _pending_rows: int = attrs.field(default=0, init=False)

    def stored(self, records: Sequence[DispatchRecord], since: int) -> None:
        """Records that reached the log, from one dispatch batch: those at or after ``since``
        (what was there before this start was counted by the process that wrote it). A
        :class:`~wire.dispatch_batch.DispatchBatch` is counted on its columns, a few numpy
        calls per batch however many records it holds."""
        if isinstance(records, DispatchBatch):
            if len(records) and records.physical_offset[0] < since:  # only after a restart
                records = records.since(since)
            self._stored_columns(records)
            return
        for record in records:  # a store that hands out records one by one
            if record.physical_offset >= since:
                self._add(record.topic, 1, record.size, _bucket_of(record.size), 1)

    def _stored_columns(self, batch: DispatchBatch) -> None:
        """Keep the batch's topic and size columns for the next fold: counting a batch of 32
        on its own costs ~9 µs of numpy calls, whatever its size, and a broker taking batched
        sends dispatches one such batch per request."""
        if len(batch):
            self._pending.append((batch.topics, batch.topic_index, batch.size))
            self._pending_rows += len(batch)
            if self._pending_rows >= FOLD_ROWS or len(self._pending) >= FOLD_BATCHES:
                self._fold()

    def _fold(self) -> None:
        """Count every pending batch at once: one set of numpy calls over all their rows, then
        one Python step per distinct topic."""
        pending, self._pending, self._pending_rows = self._pending, [], 0
        if not pending:
            return
        ids: dict[str, int] = {}
        entry_ids = np.fromiter(
            (ids.setdefault(topic, len(ids)) for topics, _, _ in pending for topic in topics), dtype=np.int64
        )
        starts = np.cumsum([0, *(len(topics) for topics, _, _ in pending[:-1])])
        lengths = [len(index) for _, index, _ in pending]
        local = np.concatenate([index for _, index, _ in pending]).astype(np.int64)
        index = entry_ids[local + np.repeat(starts, lengths)]
        sizes = np.concatenate([size for _, _, size in pending])
        width = len(MESSAGE_SIZE_BUCKETS) + 1
        buckets = np.searchsorted(_BOUNDS, sizes, side="left")
        per_bucket = np.bincount(index * width + buckets, minlength=len(ids) * width).reshape(len(ids), width)
        totals = np.bincount(index, weights=sizes, minlength=len(ids)).tolist()
        for topic, position in ids.items():
            counts = per_bucket[position].tolist()
            row = self._row(topic)
            row[_IN_COUNT] += sum(counts)
            row[_IN_BYTES] += int(totals[position])
            for bucket, count in enumerate(counts):
                row[_FIRST_BUCKET + bucket] += count

    def _add(self, topic: str, count: int, size: int, bucket: int, in_bucket: int) -> None:
        row = self._row(topic)
        row[_IN_COUNT] += count
        row[_IN_BYTES] += size
        row[_FIRST_BUCKET + bucket] += in_bucket

    def _row(self, topic: str) -> list[int]:
        row = self._stored.get(topic)
        if row is None:
            row = self._stored[topic] = [0] * (_FIRST_BUCKET + len(MESSAGE_SIZE_BUCKETS) + 1)
        return row

    def pulled(self, topic: str, group: str, count: int, size: int) -> None:
        row = self._pulled.get((topic, group))
        if row is None:
            row = self._pulled[(topic, group)] = [0, 0]
        row[0] += count
        row[1] += size

    def dead_lettered(self, topic: str, group: str) -> None:
        key = (topic, group)
        self._dead_lettered[key] = self._dead_lettered.get(key, 0) + 1

    def snapshot(
        self, gauges: GaugeSnapshot | None, requests: dict[str, list[RequestFigures]] | None = None
    ) -> Snapshot:
        """On the broker's loop: copies the exporter thread may read at leisure."""
        self._fold()
        return Snapshot(
            {topic: list(row) for topic, row in self._stored.items()},
            {key: list(row) for key, row in self._pulled.items()},
            dict(self._dead_lettered),
            gauges,
            requests or {},
        )

    def registry_of(self, snapshot: Snapshot) -> CollectorRegistry:
        """A registry that renders ``snapshot`` (taken on the loop; rendered anywhere)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Rendered((self.cluster, "broker", self.node_id), snapshot))
        return registry


@attrs.define(eq=False)
class _Rendered(Collector):
    node: tuple[str, str, str]
    snapshot: Snapshot

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        snapshot = self.snapshot
        yield self._requests(snapshot.requests)
        if snapshot.gauges is None:
            return  # a NameServer alone: requests only
        yield from self._stored(snapshot.stored)
        yield from self._pulled(snapshot.pulled)
        dlq = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a dead-letter queue (topic: where the message was when sent back).",
            labels=(*NODE_LABELS, "topic", "consumer_group"),
        )
        for (topic, group), count in snapshot.dead_lettered.items():
            dlq.add_metric([*self.node, topic, group], count)
        yield dlq
        yield from self._gauges(snapshot.gauges)
        yield from self._latencies(snapshot.gauges)

    def _requests(self, requests: dict[str, list[RequestFigures]]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Requests served and their latency in milliseconds, by request code, response code and "
            "result (response_code -1: no response, as for oneway requests).",
            labels=(*NODE_LABELS, "protocol_type", "request_code", "response_code", "result"),
            unit="",
        )
        bounds = [*(f"{float(b)}" for b in RPC_LATENCY_BOUNDS_MS), "+Inf"]
        cluster, _, node_id = self.node
        for server, figures in requests.items():
            for row in figures:
                cumulative = list(itertools.accumulate(row.counts))
                family.add_metric(
                    [
                        cluster,
                        server,
                        node_id,
                        "remoting",
                        str(row.request_code),
                        str(row.response_code),
                        row.result,
                    ],
                    list(zip(bounds, cumulative, strict=True)),
                    row.total_seconds * 1000,
                )
        return family

    def _latencies(self, taken: GaugeSnapshot) -> Iterator[HistogramMetricFamily]:
        for name, documentation, histograms in (
            (
                "trocket_flush_latency_seconds",
                "How long each flush of the commit log took.",
                taken.flush_latency,
            ),
            (
                "trocket_replication_latency_seconds",
                "How long a SYNC_MASTER's puts waited for a slave's acknowledgement.",
                taken.replication_latency,
            ),
        ):
            family = HistogramMetricFamily(name, documentation, labels=NODE_LABELS)
            for histogram in histograms.values():
                bounds = [*(f"{float(b)}" for b in histogram.bounds), "+Inf"]
                family.add_metric(
                    list(self.node),
                    list(zip(bounds, histogram.cumulative(), strict=True)),
                    histogram.total_seconds,
                )
            yield family

    def _stored(self, stored: dict[str, list[int]]) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        labels = (*NODE_LABELS, "topic")
        messages = CounterMetricFamily("rocketmq_messages_in", "Messages stored by sends.", labels=labels)
        throughput = CounterMetricFamily("rocketmq_throughput_in", "Bytes stored by sends.", labels=labels)
        sizes = HistogramMetricFamily(
            "rocketmq_message_size", "Stored message sizes in bytes.", labels=labels
        )
        bounds = [*(f"{float(b)}" for b in MESSAGE_SIZE_BUCKETS), "+Inf"]
        for topic, row in stored.items():
            values = [*self.node, topic]
            messages.add_metric(values, row[_IN_COUNT])
            throughput.add_metric(values, row[_IN_BYTES])
            cumulative, running = [], 0
            for count in row[_FIRST_BUCKET:]:
                running += count
                cumulative.append(running)
            sizes.add_metric(values, list(zip(bounds, cumulative, strict=True)), row[_IN_BYTES])
        yield from (messages, throughput, sizes)

    def _pulled(self, pulled: dict[tuple[str, str], list[int]]) -> Iterator[CounterMetricFamily]:
        labels = (*NODE_LABELS, "topic", "consumer_group")
        messages = CounterMetricFamily("rocketmq_messages_out", "Messages consumers pulled.", labels=labels)
        throughput = CounterMetricFamily("rocketmq_throughput_out", "Bytes consumers pulled.", labels=labels)
        for (topic, group), (count, size) in pulled.items():
            messages.add_metric([*self.node, topic, group], count)
            throughput.add_metric([*self.node, topic, group], size)
        yield from (messages, throughput)

    def _gauges(self, taken: GaugeSnapshot) -> Iterator[GaugeMetricFamily]:
        values = (
            (
                "rocketmq_storage_size",
                "Commit log bytes held, oldest file to write position.",
                taken.storage_size,
            ),
            ("rocketmq_storage_flush_behind_bytes", "Bytes written, not yet flushed.", taken.flush_behind),
            (
                "rocketmq_storage_dispatch_behind_bytes",
                "Bytes written, not yet dispatched.",
                taken.dispatch_behind,
            ),
            (
                "trocket_recovery_records_scanned",
                "Records the start's recovery scanned.",
                taken.recovery_scanned,
            ),
            (
                "trocket_recovery_truncated_bytes",
                "Bytes the start's recovery cut off.",
                taken.recovery_truncated,
            ),
        )
        for name, documentation, value in values:
            family = GaugeMetricFamily(name, documentation, labels=NODE_LABELS)
            family.add_metric(self.node, value)
            yield family
        group_labels = (*NODE_LABELS, "topic", "consumer_group")
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages", "Messages stored and not yet consumed.", labels=group_labels
        )
        latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency",
            "Milliseconds since the oldest unconsumed message was stored.",
            labels=group_labels,
        )
        in_flight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages",
            "Messages pulled and not yet committed (pull offset minus committed offset), or popped and "
            "not yet acked.",
            labels=group_labels,
        )
        for (topic, group), behind in taken.lag.items():
            lag.add_metric([*self.node, topic, group], behind.messages)
            latency.add_metric([*self.node, topic, group], behind.age_ms)
            in_flight.add_metric([*self.node, topic, group], behind.in_flight)
        yield lag
        yield latency
        yield in_flight
        for name, documentation in POP_COUNTERS:
            if name in taken.pop_counts:
                counter = CounterMetricFamily(f"trocket_pop_{name}", documentation, labels=NODE_LABELS)
                counter.add_metric(self.node, taken.pop_counts[name])
                yield counter
        if taken.recovery_clean is not None:
            family = GaugeMetricFamily(
                "trocket_recovery_clean_shutdown",
                "1 when the start found a clean shutdown.",
                labels=NODE_LABELS,
            )
            family.add_metric(self.node, 1 if taken.recovery_clean else 0)
            yield family
