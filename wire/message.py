"""Messages as the put path and the clients see them, and the properties codec.

:class:`Message` is a plain ``attrs.define`` class without validators because the put path
creates one per message when a hook asks for objects; a batch that arrives encoded stays
columns (:attr:`MessageBatch.encoded`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from wire.batch_codec import string_hash
from wire.names import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TIMER_PROPERTIES,
)

if TYPE_CHECKING:
    from wire.wire_batch import WireBatch


def properties_text(properties: Mapping[str, str]) -> str:
    """Properties as ``key\\x01value\\x02`` pairs (RocketMQ's wire and disk form), as text:
    joined by ``str.join`` in C (a lone send's header field, 1.3 -> 1.15 µs for three pairs
    on a slow machine); a value that is not a string (typed ``str``, but Python does not
    check) is formatted with ``str()`` instead."""
    if not properties:
        return ""
    try:
        return "\x02".join(map("\x01".join, properties.items())) + "\x02"
    except TypeError:
        return "".join(f"{k}\x01{v}\x02" for k, v in properties.items())


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Encode properties as ``key\\x01value\\x02`` pairs (RocketMQ's wire and disk form)."""
    return properties_text(properties).encode() if properties else b""


def decode_properties(data: bytes | memoryview) -> dict[str, str]:
    """Decode ``key\\x01value\\x02`` pairs; empty parts and parts without ``\\x01`` are ignored."""
    result: dict[str, str] = {}
    for part in bytes(data).decode("utf-8", "replace").split("\x02"):
        key, sep, value = part.partition("\x01")
        if sep:
            result[key] = value
    return result


def tags_code(tags: str | None) -> int:
    """The consume-queue tag field for a message's ``TAGS`` (0 when it has none)."""
    return string_hash(tags) if tags else 0


class MessagePropertiesView:
    """Typed access to the reserved properties, shared by messages to store and stored ones."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        """``KEYS`` split on spaces (RocketMQ's separator)."""
        return self.properties.get(PROPERTY_KEYS, "").split()

    @property
    def unique_key(self) -> str | None:
        """The client's ``UNIQ_KEY``: what users call the message id."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@attrs.define
class Message(MessagePropertiesView):
    """One message as the put path sees it, before it is stored.

    Mutable and validator-free on purpose: it is created per message and ``trocket_before_append``
    implementations may rewrite it (for example a delayed message moved to the schedule topic).
    ``body`` is stored as given; when ``sys_flag`` has :data:`SYSFLAG_COMPRESSED` it is already
    compressed by the client.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = attrs.field(factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def wait_store_ok(self) -> bool:
        """RocketMQ's ``WAIT`` property: whether the send waits for flush/replication."""
        return self.properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"

    @property
    def delay_level(self) -> int:
        try:
            return int(self.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0"))
        except ValueError:
            return 0

    @property
    def is_prepared(self) -> bool:
        """A transactional half message (prepared sysFlag or ``TRAN_MSG=true``): it must not be
        visible until the producer commits it."""
        prepared = self.sys_flag & SYSFLAG_TRANSACTION_ROLLBACK == SYSFLAG_TRANSACTION_PREPARED
        return prepared or self.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true"

    @property
    def wants_delay(self) -> bool:
        """Whether the message asks for delayed delivery (a delay level, or one of RocketMQ 5's
        :data:`TIMER_PROPERTIES`)."""
        props = self.properties
        if not props:
            return False
        if PROPERTY_DELAY_TIME_LEVEL in props and self.delay_level > 0:
            return True
        return not props.keys().isdisjoint(TIMER_PROPERTIES)  # one C call: asked twice a send


@attrs.define
class MessageBatch:
    """The unit of the put pipeline: one producer request, one or many messages.

    Hooks on the data path run once per batch. ``wait_store_ok`` is false only if every
    message asked not to wait (``WAIT=false``).
    """

    _messages: Sequence[Message] = attrs.field(alias="messages")
    producer_group: str = ""

    @property
    def messages(self) -> list[Message]:
        """The messages as objects, which hooks may rewrite. A batch that arrived encoded
        (:attr:`encoded`) builds them on first access and keeps them from then on."""
        if not isinstance(self._messages, list):
            self._messages = list(self._messages)
        return self._messages

    @property
    def encoded(self) -> WireBatch | None:
        """The batch as the client encoded it (:class:`wire.wire_batch.WireBatch`), as long
        as nothing asked for message objects: the put path then works on columns."""
        return None if isinstance(self._messages, list) else self._messages  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def payload(self) -> Sequence[Message]:
        """What the store appends: the encoded batch while there is one, else the objects."""
        return self._messages

    def needs_attention(self) -> bool:
        """Whether a message asks for a delay or a transaction: hooks that act only on those
        return at once when not (columns are searched once; objects are scanned)."""
        encoded = self.encoded
        if encoded is not None:
            return encoded.needs_attention()
        return any(m.wants_delay or m.is_prepared for m in self.messages)

    @property
    def wait_store_ok(self) -> bool:
        encoded = self.encoded
        if encoded is not None:
            return encoded.wait_store_ok()
        return any(m.wait_store_ok for m in self.messages)


@attrs.frozen
class MessageQueue:
    """A (topic, broker, queue) triple, as clients and allocation strategies see queues."""

    topic: str
    broker_name: str
    queue_id: int
