"""``df.write.format("trocket")`` and ``writeStream.format("trocket")``: rows sent as messages.

Input columns: ``body`` (binary or string, required), ``topic`` (string, unless the ``topic``
option is set, which wins), and optionally ``tags`` (string), ``keys`` (array of strings or one
string), ``properties`` (map of strings) and ``queueId`` (int: the queue of that id on the
first broker serving it; null lets the producer choose). Each Spark task sends its rows in
batches (one SEND_BATCH_MESSAGE per topic and queue), so delivery is at-least-once: a failed
task is retried by Spark and may send some rows twice, as Spark's Kafka sink does.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import pyarrow as pa
import trio
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, MapType, StringType, StructType

from kernel.errors import TrocketError
from kernel.model import MessageQueue
from plugins.spark_export.options import SinkOptions, SparkOptionError, parse_sink_options
from trocket.client.message import Message
from trocket.client.producer import Producer

log = logging.getLogger(__name__)

MAX_BATCH_BYTES = 1024 * 1024
"""A batch request stays well under the 4 MiB message limit."""


class SinkError(TrocketError):
    """Rows of one Spark task could not be sent; the message names the task and the cause."""


@attrs.frozen
class SentRows(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    rows: int


def check_input_schema(schema: StructType, options: SinkOptions) -> None:
    """:raises SparkOptionError: a required column is missing or a column has the wrong type."""
    fields = {f.name: f.dataType for f in schema.fields}
    expected: dict[str, tuple[type, ...]] = {
        "body": (BinaryType, StringType),
        "topic": (StringType,),
        "tags": (StringType,),
        "keys": (ArrayType, StringType),
        "properties": (MapType,),
        "queueId": (IntegerType,),
    }
    if "body" not in fields:
        raise SparkOptionError('the trocket sink needs a "body" column (binary or string)')
    if options.topic is None and "topic" not in fields:
        raise SparkOptionError('the trocket sink needs a "topic" column or the "topic" option')
    for name, kinds in expected.items():
        if name in fields and not isinstance(fields[name], kinds):
            raise SparkOptionError(
                f'the trocket sink\'s "{name}" column must be '
                f"{' or '.join(k.__name__.replace('Type', '').lower() for k in kinds)}, "
                f"got {fields[name].simpleString()}"
            )


class _Writer:
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise SparkOptionError(
                "the trocket sink only appends (a topic cannot be overwritten); use mode('append')"
            )
        self.options = parse_sink_options(options)
        check_input_schema(schema, self.options)

    def _write(self, batches: Iterator[pa.RecordBatch]) -> SentRows:
        partition = _partition_id()
        try:
            rows = trio.run(_send_all, self.options, batches)
        except Exception as error:  # noqa: BLE001 - re-raised with the task named
            raise SinkError(f"trocket sink, task partition {partition}: {error}") from error
        return SentRows(partition, rows)

    @staticmethod
    def _report(messages: list[SentRows | None], what: str) -> None:
        sent = sum(m.rows for m in messages if m is not None)
        log.info("trocket sink: %s: %d rows sent by %d tasks", what, sent, len(messages))


class TrocketBatchWriter(_Writer, DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentRows:
        return self._write(iterator)

    def commit(self, messages: list[SentRows | None]) -> None:
        self._report(messages, "committed")

    def abort(self, messages: list[SentRows | None]) -> None:
        self._report(messages, "aborted (rows already sent stay sent: at-least-once)")


class TrocketStreamWriter(_Writer, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentRows:
        return self._write(iterator)

    def commit(self, messages: list[SentRows | None], batchId: int) -> None:
        self._report(messages, f"batch {batchId} committed")

    def abort(self, messages: list[SentRows | None], batchId: int) -> None:
        self._report(messages, f"batch {batchId} aborted (rows already sent stay sent: at-least-once)")


def _partition_id() -> int:
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context.partitionId() if context is not None else -1
    except Exception:  # noqa: BLE001 - only used to name the task in errors
        return -1


async def _send_all(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    sent = 0
    async with Producer(
        options.producer_group,
        options.namesrv,
        send_timeout=options.send_timeout,
        credentials=options.security.credentials(),
        tls=options.security.tls_context() or False,
    ) as producer:
        queues_by_topic: dict[str, tuple[MessageQueue, ...]] = {}
        for batch in batches:
            groups: dict[tuple[str, int | None], list[Message]] = defaultdict(list)
            for row in batch.to_pylist():
                message, queue_id = _message(row, options.topic)
                groups[(message.topic, queue_id)].append(message)
            for (topic, queue_id), messages in groups.items():
                queue = None
                if queue_id is not None:
                    if topic not in queues_by_topic:
                        queues_by_topic[topic] = await producer.fetch_publish_message_queues(topic)
                    queue = _queue_with_id(queues_by_topic[topic], topic, queue_id)
                for chunk in _chunks(messages, options.batch_size):
                    await producer.send_batch(chunk, queue=queue)
                    sent += len(chunk)
    return sent


def _message(row: dict[str, Any], topic_option: str | None) -> tuple[Message, int | None]:
    topic = topic_option or row.get("topic")
    if not topic:
        raise SparkOptionError("a row has no topic (null topic column and no topic option)")
    body = row["body"]
    if body is None:
        raise SparkOptionError(f"a row for topic {topic} has a null body")
    keys = row.get("keys") or ()
    if isinstance(keys, str):
        keys = keys.split()
    properties = row.get("properties") or {}
    if isinstance(properties, list):  # Arrow maps arrive as (key, value) pairs
        properties = dict(properties)
    message = Message(
        topic,
        body.encode() if isinstance(body, str) else bytes(body),
        tags=row.get("tags") or None,
        keys=tuple(k for k in keys if k),
        properties={str(k): str(v) for k, v in properties.items() if v is not None},
    )
    return message, row.get("queueId")


def _queue_with_id(queues: tuple[MessageQueue, ...], topic: str, queue_id: int) -> MessageQueue:
    for queue in queues:
        if queue.queue_id == queue_id:
            return queue
    raise SparkOptionError(
        f"topic {topic} has no writable queue {queue_id} (it has {len(queues)} per broker)"
    )


def _chunks(messages: list[Message], size: int) -> Iterator[list[Message]]:
    chunk: list[Message] = []
    chunk_bytes = 0
    for message in messages:
        if chunk and (len(chunk) >= size or chunk_bytes + len(message.body) > MAX_BATCH_BYTES):
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(message)
        chunk_bytes += len(message.body) + 64
    if chunk:
        yield chunk
