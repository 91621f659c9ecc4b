"""A consumed message as listeners see it (RocketMQ's ``MessageExt``)."""

from __future__ import annotations

import zlib

import attrs

from kernel.model import PROPERTY_RETRY_TOPIC, SYSFLAG_COMPRESSED, MessagePropertiesView, MessageQueue
from kernel.record import StoredMessage
from trocket.client.errors import ClientError

RETRY_PREFIX = "%RETRY%"


@attrs.frozen
class ReceivedMessage(MessagePropertiesView):
    """One message pulled from a broker, body inflated, topic as the producer sent it.

    ``queue`` and ``queue_offset`` say where it was pulled from: for a retried message that is
    the group's ``%RETRY%`` queue while ``topic`` is the original one (as RocketMQ resets it).
    """

    topic: str
    body: bytes
    properties: dict[str, str]
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    offset_msg_id: str
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    flag: int = 0
    sys_flag: int = 0
    stored_size: int = 0

    @property
    def msg_id(self) -> str:
        """The producer's unique id (``UNIQ_KEY``), else the broker's offset message id."""
        return self.unique_key or self.offset_msg_id

    @classmethod
    def from_stored(cls, stored: StoredMessage, queue: MessageQueue) -> ReceivedMessage:
        """:raises ClientError: for a body flagged compressed that does not inflate."""
        body = stored.body
        if stored.sys_flag & SYSFLAG_COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as error:
                raise ClientError(
                    f"message at {queue.topic}:{queue.broker_name}:{queue.queue_id} offset "
                    f"{stored.queue_offset} is flagged compressed but does not inflate: {error}"
                ) from None
        topic = stored.topic
        if topic.startswith(RETRY_PREFIX):
            topic = stored.properties.get(PROPERTY_RETRY_TOPIC, topic)
        return cls(
            topic=topic,
            body=body,
            properties=stored.properties,
            queue=queue,
            queue_offset=stored.queue_offset,
            commit_log_offset=stored.physical_offset,
            offset_msg_id=stored.offset_msg_id,
            reconsume_times=stored.reconsume_times,
            born_timestamp=stored.born_timestamp,
            store_timestamp=stored.store_timestamp,
            born_host="{}:{}".format(*stored.born_host),
            store_host="{}:{}".format(*stored.store_host),
            flag=stored.flag,
            sys_flag=stored.sys_flag,
            stored_size=stored.size,
        )
