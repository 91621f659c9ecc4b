"""Reading one queue range on an executor: pipelined pulls straight from the broker, decoded
into Arrow record batches.

A range is read in spans; each span is one ``trio.run`` that keeps ``pull_concurrency`` pulls
in flight (one per sub-range of ``pull_batch_size`` offsets, each sub-range followed from the
broker's ``nextBeginOffset`` when an answer is cut short by the broker's per-pull limits).
No suspend flag and no consumer offset commit: reads are group-free (mqadmin's
``TOOLS_CONSUMER`` group, never committed to).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import trio

from kernel.errors import RemotingConnectError, TrocketError
from kernel.model import MessageQueue
from plugins.spark_export.arrow_records import to_record_batch
from plugins.spark_export.options import ReadSettings
from plugins.spark_export.ranges import QueueRange
from trocket.admin.client import TOOLS_CONSUMER
from trocket.client.consumer.pulling import PullStatus, RawPull, pull_raw
from trocket.client.routes import RouteCache
from wire.remoting import RemotingClient
from wire.subscription import Subscription

log = logging.getLogger(__name__)


class DataLossError(TrocketError):
    """Offsets a read was planned for are no longer in the broker (``failOnDataLoss=true``)."""


def read_range(queue_range: QueueRange, settings: ReadSettings) -> Iterator[pa.RecordBatch]:
    """The messages of ``queue_range`` as record batches, in offset order.

    :raises DataLossError: offsets of the range were deleted (retention) or are missing,
        unless ``settings.fail_on_data_loss`` is false, in which case they are skipped.
    :raises PullError, RemotingError: the broker refused or could not be reached.
    """
    key = queue_range.key
    subscription = Subscription.parse(key.topic, settings.tag_expression)
    span = max(settings.batch_rows, settings.pull_batch_size)
    reader = _SpanReader(queue_range, settings, subscription)
    at = queue_range.start
    while at < queue_range.end:
        stop = min(queue_range.end, at + span)
        bodies = trio.run(reader.pull_span, at, stop)
        if bodies:
            batch = to_record_batch(
                bodies, key.topic, key.broker_name, start=at, end=stop, tags=subscription.tags
            )
            if batch.num_rows:
                yield batch
        at = stop


class _SpanReader:
    def __init__(self, queue_range: QueueRange, settings: ReadSettings, subscription: Subscription) -> None:
        self.range = queue_range
        self.settings = settings
        self.subscription = subscription
        self.queue = MessageQueue(
            queue_range.key.topic, queue_range.key.broker_name, queue_range.key.queue_id
        )
        self.address = queue_range.address

    async def pull_span(self, start: int, stop: int) -> list[bytes]:
        step = self.settings.pull_batch_size
        edges = list(range(start, stop, step))
        results: list[list[bytes]] = [[] for _ in edges]
        limiter = trio.CapacityLimiter(self.settings.pull_concurrency)
        try:
            async with (
                RemotingClient.open(
                    credentials=self.settings.security.credentials(), tls=self.settings.security.tls_context()
                ) as remoting,
                trio.open_nursery() as nursery,
            ):
                for index, low in enumerate(edges):
                    high = min(stop, low + step)
                    nursery.start_soon(self._pull_sub_range, remoting, limiter, low, high, results[index])
        except BaseExceptionGroup as group:
            raise _first_leaf(group) from None
        return [body for bodies in results for body in bodies]

    async def _pull_sub_range(
        self, remoting: RemotingClient, limiter: trio.CapacityLimiter, low: int, high: int, out: list[bytes]
    ) -> None:
        async with limiter:
            offset = low
            while offset < high:
                answer = await self._pull(remoting, offset, high - offset)
                if answer.status is PullStatus.FOUND:
                    out.append(answer.body)
                elif answer.status is PullStatus.OFFSET_ILLEGAL and offset < answer.min_offset:
                    self._lost(
                        offset,
                        min(high, answer.min_offset),
                        f"retention removed them; the queue now starts at {answer.min_offset}",
                    )
                elif answer.status is not PullStatus.NO_MATCHED_MSG:
                    self._lost(offset, high, f"the queue ends at {answer.max_offset}")
                    return
                if answer.next_begin_offset <= offset:
                    if answer.status is PullStatus.FOUND:
                        raise DataLossError(
                            f"{self.range.key}: the broker made no progress at offset {offset}"
                        )
                    return
                offset = answer.next_begin_offset

    async def _pull(self, remoting: RemotingClient, offset: int, count: int) -> RawPull:
        try:
            return await pull_raw(
                remoting,
                self.address,
                TOOLS_CONSUMER,
                self.queue,
                offset,
                self.subscription,
                max_nums=count,
                suspend_ms=0,
                timeout=self.settings.pull_timeout,
            )
        except RemotingConnectError:
            # The master may have moved (restarted elsewhere): ask the NameServer once.
            routes = RouteCache(remoting, self.settings.namesrv)
            _, addresses = await routes.subscribe_info(self.queue.topic)
            if addresses.get(self.queue.broker_name, self.address) == self.address:
                raise
            self.address = addresses[self.queue.broker_name]
            log.info("%s: broker %s moved to %s", self.range.key, self.queue.broker_name, self.address)
            return await self._pull(remoting, offset, count)

    def _lost(self, low: int, high: int, why: str) -> None:
        message = f"{self.range.key}: offsets {low}..{high - 1} are no longer in the broker ({why})"
        if self.settings.fail_on_data_loss:
            raise DataLossError(
                message
                + ". Some data may have been lost; set failOnDataLoss=false to skip it instead of failing."
            )
        log.warning("%s; skipped (failOnDataLoss=false)", message)


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first real error of a task group (one failed pull cancels its siblings)."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first_leaf(error)
        if not isinstance(error, trio.Cancelled):
            return error
    return group
