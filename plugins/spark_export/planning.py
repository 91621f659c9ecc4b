"""Turning options into per-queue offsets and partitions, on the driver (batch and streaming).

Streaming offsets are plain JSON-able dicts, ``{"topic": {"broker": {"queueId": offset}}}``,
the shape Spark writes to the checkpoint's offset log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import trio

from kernel.model import MessageQueue
from plugins.spark_export.catalog import BrokerCatalog, CatalogError, QueueBounds, QueueKey
from plugins.spark_export.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, SparkOptionError
from plugins.spark_export.range_reader import DataLossError
from plugins.spark_export.ranges import QueueRange, SplitRules, split
from trocket.admin.client import TOOLS_CONSUMER, AdminClient
from trocket.client.consumer.pulling import PullStatus, pull_raw
from trocket.client.consumer.session import new_subscription
from wire.record_columns import record_starts

log = logging.getLogger(__name__)

OffsetDict = dict[str, dict[str, dict[str, int]]]


def to_offset_dict(offsets: Mapping[QueueKey, int]) -> OffsetDict:
    out: OffsetDict = {}
    for key in sorted(offsets):
        out.setdefault(key.topic, {}).setdefault(key.broker_name, {})[str(key.queue_id)] = int(offsets[key])
    return out


def from_offset_dict(data: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[QueueKey, int]:
    return {
        QueueKey(topic, broker, int(queue_id)): int(offset)
        for topic, brokers in data.items()
        for broker, queues in brokers.items()
        for queue_id, offset in queues.items()
    }


def current_bounds(
    options: SourceOptions, catalog: BrokerCatalog, *, missing_ok: bool = False
) -> dict[QueueKey, QueueBounds]:
    """Bounds of every queue to read; a named topic that does not exist is an error unless
    ``missing_ok`` (a running stream treats it as gone, see ``failOnDataLoss``)."""
    topics = catalog.topics(options.topics, options.topic_pattern)
    if not topics and options.topic_pattern is None:
        raise SparkOptionError("no topic to read")
    return catalog.bounds(topics, missing_ok=missing_ok or options.topic_pattern is not None)


def resolve_offsets(
    spec: OffsetSpec,
    bounds: Mapping[QueueKey, QueueBounds],
    *,
    default: int,
    option: str,
) -> dict[QueueKey, int]:
    """Offsets per queue: ``earliest``/``latest``, or JSON where a queue left out takes
    ``default`` and -2/-1 mean earliest/latest."""
    if isinstance(spec, int):
        return {k: _pick(spec, b) for k, b in bounds.items()}
    known = {(k.topic, k.broker_name, k.queue_id) for k in bounds}
    for topic, brokers in spec.items():
        for broker, queues in brokers.items():
            for queue_id in queues:
                if (topic, broker, queue_id) not in known:
                    raise SparkOptionError(
                        f'option "{option}": {topic}/{broker}/{queue_id} is not a readable queue '
                        f"(known: {', '.join(str(k) for k in sorted(bounds)) or 'none'})"
                    )
    out = {}
    for key, queue in bounds.items():
        value = spec.get(key.topic, {}).get(key.broker_name, {}).get(key.queue_id, default)
        out[key] = _pick(value, queue)
    return out


def _pick(value: int, queue: QueueBounds) -> int:
    if value == EARLIEST:
        return queue.min_offset
    if value == LATEST:
        return queue.max_offset
    return value


def starting_offsets(
    options: SourceOptions, catalog: BrokerCatalog, bounds: Mapping[QueueKey, QueueBounds], *, default: int
) -> dict[QueueKey, int]:
    if options.starting_timestamp is not None:
        return catalog.offsets_for_time(bounds.values(), options.starting_timestamp)
    spec = options.starting_offsets if options.starting_offsets is not None else default
    return resolve_offsets(spec, bounds, default=EARLIEST, option="startingOffsets")


def plan_batch(options: SourceOptions, catalog: BrokerCatalog) -> list[QueueRange]:
    """The partitions of a batch read, resolved now (Kafka's batch semantics: ``latest`` is
    the latest at planning time).

    :raises DataLossError: a start is below its queue's minimum and ``failOnDataLoss`` is true.
    :raises SparkOptionError: a start lies after its end.
    """
    return split_ranges(options, catalog, batch_ranges(options, catalog))


def batch_ranges(options: SourceOptions, catalog: BrokerCatalog) -> list[QueueRange]:
    """One whole range per readable queue (empty ones included), before splitting."""
    bounds = current_bounds(options, catalog)
    starts = starting_offsets(options, catalog, bounds, default=EARLIEST)
    if options.ending_timestamp is not None:
        ends = catalog.offsets_for_time(bounds.values(), options.ending_timestamp)
    else:
        ends = resolve_offsets(options.ending_offsets, bounds, default=LATEST, option="endingOffsets")
    ranges = []
    for key, queue in sorted(bounds.items()):
        start, end = starts[key], ends[key]
        if start < queue.min_offset:
            lost = f"{key}: offsets {start}..{queue.min_offset - 1} are no longer in the broker (retention)"
            if options.read.fail_on_data_loss:
                raise DataLossError(lost + "; set failOnDataLoss=false to skip them instead of failing")
            log.warning("%s; skipped (failOnDataLoss=false)", lost)
            start = queue.min_offset
        if end > queue.max_offset:
            log.warning(
                "%s: ending offset %d is past the queue's end %d; reading to the end",
                key,
                end,
                queue.max_offset,
            )
            end = queue.max_offset
        if start > end:
            raise SparkOptionError(f"{key}: the starting offset {start} is after the ending offset {end}")
        ranges.append(QueueRange(key, queue.address, start, end))
    return ranges


def split_ranges(
    options: SourceOptions, catalog: BrokerCatalog, ranges: list[QueueRange]
) -> list[QueueRange]:
    rules = SplitRules(
        options.max_records_per_partition, options.max_bytes_per_partition, options.min_partitions
    )
    sizes = record_sizes(catalog, ranges) if options.max_bytes_per_partition else None
    return split(ranges, rules, sizes)


def record_sizes(catalog: BrokerCatalog, ranges: list[QueueRange]) -> dict[QueueKey, float]:
    """Average stored record size per queue, from up to 32 records at each range's start
    (what ``maxBytesPerPartition`` divides by)."""

    async def main() -> dict[QueueKey, float]:
        out: dict[QueueKey, float] = {}
        async with AdminClient.open(catalog.namesrv) as admin:
            for queue_range in ranges:
                if queue_range.count <= 0 or queue_range.key in out:
                    continue
                key = queue_range.key
                answer = await pull_raw(
                    admin.remoting,
                    queue_range.address,
                    TOOLS_CONSUMER,
                    MessageQueue(key.topic, key.broker_name, key.queue_id),
                    queue_range.start,
                    new_subscription(key.topic),
                    max_nums=32,
                    suspend_ms=0,
                )
                if answer.status is PullStatus.FOUND:
                    out[key] = len(answer.body) / max(1, len(record_starts(answer.body)))
        return out

    try:
        return trio.run(main)
    except Exception as error:  # noqa: BLE001 - any failure is reported as a planning error
        raise CatalogError(f"cannot sample record sizes for maxBytesPerPartition: {error}") from error
