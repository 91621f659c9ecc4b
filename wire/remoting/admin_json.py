"""fastjson's map-with-object-keys form, used by RocketMQ admin bodies keyed by MessageQueue.

RocketMQ writes ``Map<MessageQueue, X>`` as ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``,
which is not JSON. We write it the same way (Java tools read it) and read it back by turning
each object key into the string ``"topic@brokerName@queueId"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

_OBJECT_KEY = re.compile(
    r'\{\s*"brokerName"\s*:\s*"([^"]*)"\s*,\s*"queueId"\s*:\s*(\d+)\s*,\s*"topic"\s*:\s*"([^"]*)"\s*\}\s*:'
)


def dumps_queue_keyed(
    fields: Mapping[str, Any], table_name: str, entries: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]
) -> bytes:
    """``fields`` plus ``table_name`` mapping each MessageQueue object to its value."""
    dump = json.dumps
    pairs = ",".join(
        dump(dict(sorted(key.items())), separators=(",", ":")) + ":" + dump(value, separators=(",", ":"))
        for key, value in entries
    )
    head = dump(dict(fields), separators=(",", ":"))[1:-1]
    return ("{" + (head + "," if head else "") + dump(table_name) + ":{" + pairs + "}}").encode()


def loads(data: bytes | str) -> Any:
    """Parse JSON that may contain MessageQueue object keys (``"topic@broker@queueId"`` keys)."""
    text = data.decode() if isinstance(data, bytes) else data
    return json.loads(_OBJECT_KEY.sub(lambda m: json.dumps(f"{m[3]}@{m[1]}@{m[2]}") + ":", text))


def split_queue_key(key: str) -> tuple[str, str, int]:
    """(topic, brokerName, queueId) of a key produced by :func:`loads`."""
    topic, broker, queue = key.rsplit("@", 2)
    return topic, broker, int(queue)
