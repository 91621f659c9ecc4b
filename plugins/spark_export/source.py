"""``format("trocket")``: the PySpark data source (batch and streaming reads, batch and
streaming writes). Imports pyspark; :func:`plugins.spark_export.register` loads it lazily so the
broker never needs pyspark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from plugins.spark_export.catalog import BrokerCatalog, QueueBounds, QueueKey
from plugins.spark_export.options import LATEST, SourceOptions, SparkOptionError, parse_source_options
from plugins.spark_export.planning import (
    OffsetDict,
    current_bounds,
    from_offset_dict,
    plan_batch,
    split_ranges,
    starting_offsets,
    to_offset_dict,
)
from plugins.spark_export.range_reader import DataLossError, read_range
from plugins.spark_export.ranges import QueueRange, prorate
from plugins.spark_export.schema import spark_schema
from plugins.spark_export.sink import TrocketBatchWriter, TrocketStreamWriter

log = logging.getLogger(__name__)

SHORT_NAME = "trocket"


class TrocketDataSource(DataSource):
    """Messages of Trocket (or RocketMQ) topics as rows of a fixed schema; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return TrocketBatchReader(parse_source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return TrocketStreamReader(parse_source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> TrocketBatchWriter:
        return TrocketBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TrocketStreamWriter:
        return TrocketStreamWriter(self.options, schema, overwrite)


def _check_schema(schema: StructType) -> None:
    if schema is not None and schema != spark_schema():
        raise SparkOptionError(
            "the trocket source has a fixed schema; do not pass one with .schema() "
            f"(got {schema.simpleString()})"
        )


class _EmptyPartition(InputPartition):
    """Spark calls ``read`` once even when there are no partitions; this one reads nothing."""

    def __init__(self) -> None:
        super().__init__(None)


def _read(partition: InputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition.value, QueueRange):
        return iter(())
    return read_range(partition.value, options.read)


class TrocketBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan_batch(self.options, BrokerCatalog.of(self.options))
        log.info("trocket: %d partitions over %d offsets", len(ranges), sum(r.count for r in ranges))
        return [InputPartition(r) for r in ranges] or [_EmptyPartition()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


class TrocketStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over per-queue offsets, as Spark's Kafka source does.

    The instance lives in one driver-side process for the whole query, so the AvailableNow
    target, the last trigger time (``maxTriggerDelay``) and the latest offsets seen survive
    between calls.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[QueueKey, int] | None = None
        self._latest: dict[QueueKey, int] | None = None
        self._addresses: dict[QueueKey, str] = {}
        self._committed: dict[QueueKey, int] = {}
        self._last_batch_at = time.monotonic()

    def _catalog(self) -> BrokerCatalog:
        return BrokerCatalog.of(self.options)

    def _bounds(self, *, missing_ok: bool = False) -> dict[QueueKey, QueueBounds]:
        bounds = current_bounds(self.options, self._catalog(), missing_ok=missing_ok)
        self._addresses.update({k: b.address for k, b in bounds.items()})
        return bounds

    def initialOffset(self) -> OffsetDict:
        bounds = self._bounds()
        return to_offset_dict(starting_offsets(self.options, self._catalog(), bounds, default=LATEST))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {k: b.max_offset for k, b in self._bounds(missing_ok=True).items()}

    def latestOffset(self, start: OffsetDict, limit: ReadLimit) -> OffsetDict:
        begin = from_offset_dict(start)
        # Batches run one after another, so ``start`` (the previous batch's end) is processed:
        # committing it here keeps the group's lag current even for the last batch of an
        # AvailableNow run, whose commit(end) Spark would only call when planning a next batch.
        self._commit_to_group(begin)
        bounds = self._bounds(missing_ok=True)
        end: dict[QueueKey, int] = {}
        gone = sorted(set(begin) - set(bounds))
        if gone:
            message = f"queues {', '.join(map(str, gone))} are gone (topic deleted or broker down)"
            if self.options.read.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to carry on without them")
            log.warning("%s; their offsets are kept and reading resumes if they come back", message)
            end.update({k: begin[k] for k in gone})
        for key, queue in bounds.items():
            if key not in begin:
                # A new queue (topic scaled up or a broker added): it starts at its earliest
                # offset, read from the next batch on so this batch's plan stays as recorded.
                end[key] = queue.min_offset
                continue
            latest = queue.max_offset
            if self._target is not None:
                latest = min(latest, self._target.get(key, begin[key]))
            end[key] = max(begin[key], latest)
        self._latest = {k: b.max_offset for k, b in bounds.items()}
        if not isinstance(limit, ReadAllAvailable):
            end = self._limited(begin, end)
        if any(end.get(k, v) != v for k, v in begin.items()) or set(end) != set(begin):
            self._last_batch_at = time.monotonic()
        return to_offset_dict(end)

    def _limited(self, begin: dict[QueueKey, int], end: dict[QueueKey, int]) -> dict[QueueKey, int]:
        backlog = {k: end[k] - begin[k] for k in begin if k in end}
        waiting = sum(v for v in backlog.values() if v > 0)
        wanted = self.options.min_offsets_per_trigger
        # AvailableNow must drain what is there and stop, so it never waits for more.
        if wanted is not None and waiting < wanted and self._target is None:
            if time.monotonic() - self._last_batch_at < self.options.max_trigger_delay:
                return {**end, **{k: begin[k] for k in backlog}}
        cap = self.options.max_offsets_per_trigger
        if cap is None:
            return end
        grant = prorate(backlog, cap)
        return {**end, **{k: begin[k] + grant.get(k, 0) for k in backlog}}

    def reportLatestOffset(self) -> OffsetDict | None:
        return to_offset_dict(self._latest) if self._latest is not None else None

    def partitions(self, start: OffsetDict, end: OffsetDict) -> Sequence[InputPartition]:
        begin, finish = from_offset_dict(start), from_offset_dict(end)
        pending = [k for k in finish if k in begin and finish[k] > begin[k]]
        if any(k not in self._addresses for k in pending):
            self._bounds(missing_ok=True)
        ranges = []
        for key in pending:
            address = self._addresses.get(key)
            if address is None:
                message = (
                    f"{key}: planned offsets {begin[key]}..{finish[key] - 1} but no broker serves the queue"
                )
                if self.options.read.fail_on_data_loss:
                    raise DataLossError(message + "; set failOnDataLoss=false to skip them")
                log.warning("%s; skipped", message)
                continue
            ranges.append(QueueRange(key, address, begin[key], finish[key]))
        return [InputPartition(r) for r in split_ranges(self.options, self._catalog(), ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: OffsetDict) -> None:
        self._commit_to_group(from_offset_dict(end))

    def _commit_to_group(self, offsets: dict[QueueKey, int]) -> None:
        """``commitOffsetsToGroup``: progress for lag tooling only, never read back."""
        group = self.options.commit_offsets_to_group
        if not group or not offsets or offsets == self._committed:
            return
        try:
            self._catalog().commit_offsets(group, offsets, self._broker_addresses())
            self._committed = dict(offsets)
        except Exception as error:  # noqa: BLE001 - monitoring only: never fails the query
            log.warning("trocket: progress not committed to group %s: %s", group, error)

    def _broker_addresses(self) -> dict[str, str]:
        return {k.broker_name: a for k, a in self._addresses.items()}

    def stop(self) -> None:
        self._target = None
