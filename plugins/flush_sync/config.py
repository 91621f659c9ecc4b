"""``[flush_sync]``: group-commit settings (``syncFlushTimeout`` in broker.properties)."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


@attrs.frozen(kw_only=True)
class FlushSyncConfig:
    timeout: float = fields.duration("5s")
    """How long a put waits for its flush before answering FLUSH_DISK_TIMEOUT."""


PROPERTIES = {"syncFlushTimeout": rocketmq.milliseconds_alias("timeout")}
"""The RocketMQ ``broker.properties`` keys of ``[flush_sync]``."""
