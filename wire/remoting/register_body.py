"""RegisterBrokerBody: the topic configuration a broker sends with REGISTER_BROKER.

Two encodings exist: plain JSON, and (header ``compressed=true``, RocketMQ's
``compressedRegister``) a deflate stream of length-prefixed JSON pieces: the data version, the
number of topics, each topic's config, the filter-server list and the number of static-topic
mappings (0 here). Both are encoded and decoded; a Java NameServer reads either.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any


class RegisterBodyError(ValueError):
    """The body does not decode; the registration is refused with the reason."""


def encode_register_body(
    data_version: Mapping[str, Any],
    topic_configs: Mapping[str, Mapping[str, Any]],
    *,
    compressed: bool = False,
) -> bytes:
    if compressed:
        return _encode_compressed(data_version, topic_configs)
    return json.dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": dict(data_version),
                "topicConfigTable": {name: dict(config) for name, config in topic_configs.items()},
            },
        },
        separators=(",", ":"),
    ).encode()


def _encode_compressed(
    data_version: Mapping[str, Any], topic_configs: Mapping[str, Mapping[str, Any]]
) -> bytes:
    pieces = [_piece(dict(data_version)), struct.pack(">i", len(topic_configs))]
    pieces += [_piece({**config, "topicName": name}) for name, config in topic_configs.items()]
    pieces += [_piece([]), struct.pack(">i", 0)]  # filter servers, static-topic mappings
    return zlib.compress(b"".join(pieces), 9)


def _piece(value: Any) -> bytes:
    encoded = json.dumps(value, separators=(",", ":")).encode()
    return struct.pack(">i", len(encoded)) + encoded


def decode_register_body(
    body: bytes, *, compressed: bool
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(data version, topic name → TopicConfig JSON)."""
    if not body:
        return {}, {}
    try:
        if compressed:
            return _decode_compressed(zlib.decompress(body))
        wrapper = json.loads(body).get("topicConfigSerializeWrapper") or {}
        return dict(wrapper.get("dataVersion") or {}), dict(wrapper.get("topicConfigTable") or {})
    except (ValueError, AttributeError, zlib.error, struct.error) as error:
        raise RegisterBodyError(f"register body does not decode: {error}") from None


def _decode_compressed(data: bytes) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    position = 0

    def piece() -> Any:
        nonlocal position
        (length,) = struct.unpack_from(">i", data, position)
        position += 4
        value = json.loads(data[position : position + length])
        position += length
        return value

    version = piece()
    (count,) = struct.unpack_from(">i", data, position)
    position += 4
    topics = {}
    for _ in range(count):
        config = piece()
        topics[config["topicName"]] = config
    return dict(version), topics
