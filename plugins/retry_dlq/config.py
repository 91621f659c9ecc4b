"""``[retry_dlq]``: scheduled delivery settings (delay levels themselves are ``[broker]
message_delay_level``, RocketMQ's ``messageDelayLevel``)."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


@attrs.frozen(kw_only=True)
class RetryDlqConfig:
    progress_persist_interval: float = fields.duration("10s")
    """How often per-level delivery progress is written to ``config/delayOffset.json``."""
    poll_interval: float = fields.duration("1s")
    """The longest an idle delay level or the timer sleeps between looks at its queue. A safety
    net only: a newly parked message wakes its level (or the timer) as soon as it is
    dispatched, and a pending one wakes it when due (RocketMQ polls every 100 ms instead)."""
    delivery_batch: int = fields.integer(256, minimum=1)
    """Due messages moved to their real topic per put."""
    timer_max_delay: float = fields.duration("3d")
    """The furthest ahead a ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS`` message may be due
    (RocketMQ 5's ``timerMaxDelaySec``); later ones are refused with MESSAGE_ILLEGAL. Keep it
    below ``[store_mmap] file_reserved_time`` so a parked message outlives retention."""


PROPERTIES = {"timerMaxDelaySec": rocketmq.seconds_alias("timer_max_delay")}
"""The RocketMQ ``broker.properties`` keys of ``[retry_dlq]``."""
