"""``[retry_dlq]``: scheduled delivery settings (delay levels themselves are ``[broker]
message_delay_level``, RocketMQ's ``messageDelayLevel``)."""

from __future__ import annotations

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class RetryDlqConfig:
    progress_persist_interval: float = fields.duration("10s")
    """How often per-level delivery progress is written to ``config/delayOffset.json``."""
    poll_interval: float = fields.duration("100ms")
    """How often an idle level looks for newly parked messages (RocketMQ polls every 100 ms)."""
    delivery_batch: int = fields.integer(256, minimum=1)
    """Due messages moved to their real topic per put."""
