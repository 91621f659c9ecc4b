"""``[flush_sync]``: group-commit settings (``syncFlushTimeout`` in broker.properties)."""

from __future__ import annotations

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class FlushSyncConfig:
    timeout: float = fields.duration("5s")
    """How long a put waits for its flush before answering FLUSH_DISK_TIMEOUT."""
