"""What the driver asks the cluster while planning: which queues exist, their offset bounds,
offsets by store time, and (for monitoring only) committing progress to a consumer group.

Spark calls the driver side synchronously, so each question is one short ``trio.run`` with
its own connections; planning happens once per query or micro-batch, never per row.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import attrs
import trio

from plugins.spark_export.options import ClusterSecurity, SourceOptions
from trocket.admin.client import AdminClient, AdminError
from wire.remoting import RequestCode, ResponseCode

log = logging.getLogger(__name__)
T = TypeVar("T")

SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "RMQ_SYS_", "rmq_sys_")
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC"})


class CatalogError(AdminError):
    """A topic does not exist, or the cluster could not answer a planning question."""


@attrs.frozen(order=True)
class QueueKey:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker_name}/{self.queue_id}"


@attrs.frozen
class QueueBounds:
    key: QueueKey
    address: str
    """The broker master executors pull from."""
    min_offset: int
    max_offset: int


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES)


@attrs.frozen
class BrokerCatalog:
    namesrv: tuple[str, ...]
    security: ClusterSecurity = ClusterSecurity()
    timeout: float = 10.0
    retries: int = 3
    """A question that got no answer (a timeout, a refused or lost connection) is asked again
    this many times before it fails (``fetchOffset.numRetries``): a running stream's trigger
    must not die of one slow moment of a NameServer or broker."""
    retry_interval: float = 1.0
    """Seconds before each retry (``fetchOffset.retryIntervalMs``)."""

    @classmethod
    def of(cls, options: SourceOptions) -> BrokerCatalog:
        """The catalog a source's options describe."""
        return cls(
            options.read.namesrv,
            options.read.security,
            retries=options.fetch_retries,
            retry_interval=options.fetch_retry_interval,
        )

    def topics(self, names: Sequence[str], pattern: re.Pattern[str] | None) -> list[str]:
        """The named topics, or every non-system topic the pattern matches in full."""
        if pattern is None:
            return list(names)

        async def ask(admin: AdminClient) -> list[str]:
            return sorted(
                t for t in await admin.topic_list() if pattern.fullmatch(t) and not is_system_topic(t)
            )

        return self._run(ask)

    def bounds(self, topics: Iterable[str], *, missing_ok: bool = False) -> dict[QueueKey, QueueBounds]:
        """Every readable queue of ``topics`` on live masters, with its min and max offsets.

        :raises CatalogError: a topic does not exist (unless ``missing_ok``: a pattern's topic
            deleted meanwhile is skipped; only the NameServer saying it has no route counts,
            a question it did not answer is asked again and then fails), or the cluster did
            not answer.
        """
        wanted = list(topics)

        async def ask(admin: AdminClient) -> dict[QueueKey, QueueBounds]:
            out: dict[QueueKey, QueueBounds] = {}
            for topic in wanted:
                try:
                    route = await admin.route(topic)
                except AdminError as error:
                    if error.code != ResponseCode.TOPIC_NOT_EXIST:
                        raise  # no answer: asked again (see ``retries``), never taken as "no topic"
                    if missing_ok:
                        continue
                    raise CatalogError(f"topic {topic!r} cannot be read: {error}") from None
                readable = {d["brokerName"]: d["readQueueNums"] for d in route["queueDatas"] if d["perm"] & 4}
                for broker in route["brokerDatas"]:
                    name, address = broker["brokerName"], broker["brokerAddrs"].get("0")
                    if address is None or name not in readable:
                        continue
                    for row in await admin.broker_topic_stats(address, topic, missing_ok=True):
                        if row["brokerName"] == name and int(row["queueId"]) < readable[name]:
                            key = QueueKey(topic, name, int(row["queueId"]))
                            out[key] = QueueBounds(key, address, row["minOffset"], row["maxOffset"])
            return out

        return self._run(ask)

    def offsets_for_time(self, queues: Iterable[QueueBounds], timestamp_ms: int) -> dict[QueueKey, int]:
        """The first offset stored at or after ``timestamp_ms`` per queue (the queue's max
        offset when everything is older), through SEARCH_OFFSET_BY_TIMESTAMP."""
        targets = list(queues)

        async def ask(admin: AdminClient) -> dict[QueueKey, int]:
            out = {}
            for queue in targets:
                response = await admin.call(
                    queue.address,
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                    {"topic": queue.key.topic, "queueId": queue.key.queue_id, "timestamp": timestamp_ms},
                )
                out[queue.key] = int(response.ext.get("offset", queue.max_offset))
            return out

        return self._run(ask)

    def commit_offsets(
        self, group: str, offsets: Mapping[QueueKey, int], addresses: Mapping[str, str]
    ) -> None:
        """Write ``offsets`` as ``group``'s consumed offsets (UPDATE_CONSUMER_OFFSET), for lag
        tooling only: the source never reads them back."""

        async def ask(admin: AdminClient) -> None:
            for key, offset in sorted(offsets.items()):
                address = addresses.get(key.broker_name)
                if address is None:
                    continue
                await admin.call(
                    address,
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {
                        "consumerGroup": group,
                        "topic": key.topic,
                        "queueId": key.queue_id,
                        "commitOffset": offset,
                    },
                )

        self._run(ask)

    def _run(self, ask: Callable[[AdminClient], Awaitable[T]]) -> T:
        async def main() -> T:
            async with AdminClient.open(
                self.namesrv,
                timeout=self.timeout,
                credentials=self.security.credentials(),
                tls=self.security.tls_context() or False,
            ) as admin:
                return await ask(admin)

        retried = 0
        while True:
            try:
                return trio.run(main)
            except AdminError as error:
                if isinstance(error, CatalogError):
                    raise
                # A refusal (a response code) is the cluster's answer: asking again changes nothing.
                if error.code is not None or retried >= self.retries:
                    raise CatalogError(f"NameServer {','.join(self.namesrv)}: {error}") from None
                retried += 1
                log.warning(
                    "trocket: no answer from the cluster (%s); asking again in %gs (retry %d of %d, "
                    "fetchOffset.numRetries)",
                    error,
                    self.retry_interval,
                    retried,
                    self.retries,
                )
            time.sleep(self.retry_interval)
