"""The body of SEND_BATCH_MESSAGE: each message as total size, magic, body CRC, flag, body
length, body, properties length, properties (RocketMQ's ``MessageDecoder.encodeMessage``).

The broker reads these bodies as columns (:mod:`wire.wire_batch`); the producer writes them
the same way round: the messages' unique ids come from one clock read
(:func:`~trocket.client.message_id.new_message_ids`), properties shared by messages without
properties of their own are encoded once per batch, and the entries are written by the batch
codec (:func:`wire.batch_codec.encode_entries`, compiled when built), not packed one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from kernel.model import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ_KEY
from kernel.model import encode_properties
from trocket.client.message import Message
from trocket.client.message_id import new_message_ids
from wire import batch_codec

_UNIQ = f"{PROPERTY_UNIQ_KEY}\x01".encode()


def encode_batch(entries: Iterable[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """``entries`` are (flag, body, properties)."""
    flags, bodies, properties = [], [], []
    for flag, body, props in entries:
        flags.append(flag)
        bodies.append(bytes(body))
        properties.append(encode_properties(props))
    return batch_codec.encode_entries(bodies, properties, np.array(flags, dtype=np.int64))


def encode_messages(messages: Sequence[Message]) -> tuple[bytes, list[str]]:
    """The batch body of ``messages`` and their unique ids (``UNIQ_KEY``), as
    :func:`encode_batch` of each message's wire properties with a new unique id (unless the
    message has one) would write them, byte for byte."""
    fresh = new_message_ids(len(messages))
    shared: dict[tuple[str | None, tuple[str, ...]], bytes] = {}
    ids: list[str] = []
    properties: list[bytes] = []
    for message, unique in zip(messages, fresh, strict=True):
        if message.properties or message.delay_level > 0:
            wire = message.wire_properties()
            unique = wire.setdefault(PROPERTY_UNIQ_KEY, unique)
            properties.append(encode_properties(wire))
        else:
            # Only tags and keys: the same text for every such message, then the unique id.
            key = (message.tags, tuple(message.keys))
            base = shared.get(key)
            if base is None:
                base = shared[key] = encode_properties(message.wire_properties()) + _UNIQ
            properties.append(base + unique.encode() + b"\x02")
        ids.append(unique)
    bodies = [m.body if type(m.body) is bytes else bytes(m.body) for m in messages]
    flags = np.fromiter((m.flag for m in messages), dtype=np.int64, count=len(messages))
    return batch_codec.encode_entries(bodies, properties, flags), ids
