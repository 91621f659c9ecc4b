"""Where a consumer keeps its progress: on the brokers (clustering) or in a local file
(broadcasting), as RocketMQ's ``RemoteBrokerOffsetStore`` and ``LocalFileOffsetStore``.

Offsets are the *next* offset to consume. ``update`` only changes memory; ``persist`` writes
(every 5 s and at shutdown, by the consumer). A queue's offset is the lowest one still in
flight, so a crash re-delivers at most what was in flight plus the last 5 s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from kernel.errors import ConfigError, RemotingError
from kernel.model import MessageQueue
from kernel.persist import read_json_with_backup, write_json_atomic
from trocket.client.consumer.modes import ConsumeFromWhere, MessageModel
from trocket.client.errors import ClientError
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

if TYPE_CHECKING:
    from trocket.client.consumer.session import ConsumerSession

UNKNOWN = -1


class OffsetStore(Protocol):
    async def read_stored(self, queue: MessageQueue) -> int:
        """The persisted offset, or :data:`UNKNOWN` for a queue the group never consumed."""

    def read(self, queue: MessageQueue) -> int:
        """The offset in memory, or :data:`UNKNOWN`."""

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool = False) -> None: ...

    async def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Write the in-memory offsets of ``queues``; raises :class:`ClientError` on failure."""

    def remove(self, queue: MessageQueue) -> None: ...


@attrs.define(eq=False)
class _MemoryTable:
    table: dict[MessageQueue, int] = attrs.field(factory=dict)

    def read(self, queue: MessageQueue) -> int:
        return self.table.get(queue, UNKNOWN)

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        if increase_only and offset < self.table.get(queue, UNKNOWN):
            return
        self.table[queue] = offset

    def remove(self, queue: MessageQueue) -> None:
        self.table.pop(queue, None)


@attrs.define(eq=False)
class RemoteOffsetStore(_MemoryTable):
    """Offsets kept by each queue's broker (``consumerOffset.json`` there)."""

    remoting: RemotingClient = attrs.field(kw_only=True)
    group: str = attrs.field(kw_only=True)
    address_for: Callable[[MessageQueue], Awaitable[str]] = attrs.field(kw_only=True)
    """A queue's broker master address (from the topic routes)."""
    timeout: float = 3.0
    zero_if_not_found: bool = True
    """RocketMQ 4's answer for a group new to a queue whose first message is still in memory:
    0 rather than "not found". A consumer starting from a timestamp turns it off (RocketMQ 5's
    ``setZeroIfNotFound``) so it really starts at the time."""

    async def read_stored(self, queue: MessageQueue) -> int:
        header: dict[str, object] = {
            "consumerGroup": self.group,
            "topic": queue.topic,
            "queueId": queue.queue_id,
        }
        if not self.zero_if_not_found:
            header["setZeroIfNotFound"] = False
        response = await self._call(queue, RequestCode.QUERY_CONSUMER_OFFSET, header)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return UNKNOWN
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"query offset of {_name(queue)} failed: {response.code} {response.remark}")
        return int(response.ext.get("offset", UNKNOWN))

    async def persist(self, queues: Iterable[MessageQueue]) -> None:
        errors = []
        for queue in queues:
            offset = self.table.get(queue)
            if offset is None or offset < 0:
                continue
            header = {
                "consumerGroup": self.group,
                "topic": queue.topic,
                "queueId": queue.queue_id,
                "commitOffset": offset,
            }
            try:
                response = await self._call(queue, RequestCode.UPDATE_CONSUMER_OFFSET, header)
            except ClientError as error:
                errors.append(str(error))
                continue
            if response.code != ResponseCode.SUCCESS:
                errors.append(f"{_name(queue)}: {response.code} {response.remark or ''}")
        if errors:
            raise ClientError(f"group {self.group}: offsets not committed: {'; '.join(errors)}")

    async def _call(self, queue: MessageQueue, code: int, header: dict[str, object]) -> RemotingCommand:
        address = await self.address_for(queue)
        try:
            return await self.remoting.invoke(address, RemotingCommand.request(code, header), self.timeout)
        except RemotingError as error:
            raise ClientError(f"{_name(queue)}: broker {address} did not answer: {error}") from None


@attrs.define(eq=False)
class LocalOffsetStore(_MemoryTable):
    """Offsets in a JSON file of this client (broadcasting: every instance has its own
    progress), written atomically with a ``.bak`` of the previous version."""

    path: Path = attrs.field(kw_only=True)
    _loaded: dict[MessageQueue, int] | None = attrs.field(default=None, init=False)

    async def read_stored(self, queue: MessageQueue) -> int:
        if self._loaded is None:
            self._loaded = await trio.to_thread.run_sync(self._load)
        return self._loaded.get(queue, UNKNOWN)

    async def persist(self, queues: Iterable[MessageQueue]) -> None:
        if self._loaded is None:
            self._loaded = await trio.to_thread.run_sync(self._load)
        for queue in queues:
            if self.table.get(queue, UNKNOWN) >= 0:
                self._loaded[queue] = self.table[queue]
        rows = [
            {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, "offset": o}
            for q, o in sorted(self._loaded.items(), key=lambda item: attrs.astuple(item[0]))
        ]
        try:
            await trio.to_thread.run_sync(write_json_atomic, self.path, {"offsetTable": rows})
        except OSError as error:
            raise ClientError(f"cannot write consumer offsets to {self.path}: {error}") from None

    def _load(self) -> dict[MessageQueue, int]:
        try:
            data = read_json_with_backup(self.path)
        except (OSError, ValueError, ConfigError) as error:
            raise ClientError(f"cannot read consumer offsets from {self.path}: {error}") from None
        if data is None:
            return {}
        try:
            return {
                MessageQueue(str(r["topic"]), str(r["brokerName"]), int(r["queueId"])): int(r["offset"])
                for r in data["offsetTable"]
            }
        except (KeyError, TypeError, ValueError) as error:
            raise ClientError(f"{self.path}: offsetTable is malformed ({error!r})") from None


def _name(queue: MessageQueue) -> str:
    return f"{queue.topic}:{queue.broker_name}:{queue.queue_id}"


def offset_store_for(
    session: ConsumerSession, model: MessageModel, where: ConsumeFromWhere, directory: Path | None
) -> OffsetStore:
    """Broadcasting keeps offsets in ``<directory>/<client id>/<group>/offsets.json``
    (default directory ``~/.rocketmq_offsets``, as RocketMQ); clustering on the brokers."""
    if model is MessageModel.BROADCASTING:
        base = directory or Path.home() / ".rocketmq_offsets"
        return LocalOffsetStore(path=base / session.client_id / session.group / "offsets.json")
    return RemoteOffsetStore(
        remoting=session.remoting,
        group=session.group,
        address_for=session.address_for,
        zero_if_not_found=where is not ConsumeFromWhere.TIMESTAMP,
    )
