"""``[flush_async]``: RocketMQ's real-time flush service settings."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


@attrs.frozen(kw_only=True)
class FlushAsyncConfig:
    interval: float = fields.duration("500ms")
    """``flushIntervalCommitLog``: how often the flusher looks for dirty pages."""
    least_pages: int = fields.integer(4, minimum=0)
    """``flushCommitLogLeastPages``: flush only when this many 4 KiB pages are dirty."""
    thorough_interval: float = fields.duration("10s")
    """``flushCommitLogThoroughInterval``: flush whatever is dirty at least this often."""
    timed: bool = fields.boolean(True)
    """``flushCommitLogTimed``: sleep the interval (true) or also wake on every append (false)."""
    commit_interval: float = fields.duration("200ms")
    """``commitIntervalCommitLog``: how often staged appends are written into the files when
    the store stages writes (``[store_mmap] write_path = "buffered"``)."""
    commit_least_pages: int = fields.integer(4, minimum=0)
    """``commitCommitLogLeastPages``: commit only when this many 4 KiB pages are staged."""
    commit_thorough_interval: float = fields.duration("200ms")
    """``commitCommitLogThoroughInterval``: commit whatever is staged at least this often, so
    a trickle of small messages becomes visible within this time."""


PROPERTIES = {
    "flushIntervalCommitLog": rocketmq.milliseconds_alias("interval"),
    "flushCommitLogLeastPages": rocketmq.integer_alias("least_pages", "pages"),
    "flushCommitLogThoroughInterval": rocketmq.milliseconds_alias("thorough_interval"),
    "flushCommitLogTimed": rocketmq.boolean_alias("timed"),
    "commitIntervalCommitLog": rocketmq.milliseconds_alias("commit_interval"),
    "commitCommitLogLeastPages": rocketmq.integer_alias("commit_least_pages", "pages"),
    "commitCommitLogThoroughInterval": rocketmq.milliseconds_alias("commit_thorough_interval"),
}
"""The RocketMQ ``broker.properties`` keys of ``[flush_async]``."""
