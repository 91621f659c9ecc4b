"""What derived views learn about one stored record (the store's dispatch loop decodes it)."""

from __future__ import annotations

import attrs


@attrs.define
class DispatchRecord:
    """What derived views learn about one stored record, decoded once per dispatch batch."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    sys_flag: int
    keys: str
    unique_key: str | None
    properties: dict[str, str]
    prepared_transaction_offset: int = 0
