"""``[pop]``: POP consumption settings, under RocketMQ's names in ``broker.properties``."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


@attrs.frozen(kw_only=True)
class PopConfig:
    revive_queue_num: int = fields.integer(8, minimum=1, maximum=64)
    """Queues of the revive log ``rmq_sys_REVIVE_LOG_<cluster>`` (``reviveQueueNum``): a
    group's checkpoints and acks always go to the same queue, so each replays in order."""
    pop_from_retry_probability: int = fields.integer(20, minimum=0, maximum=100)
    """Percent of pops that look at the group's retry topic before the topic itself
    (``popFromRetryProbability``); the others look at it only when the topic had too few."""
    max_pop_messages: int = fields.integer(32, minimum=1, maximum=1024)
    """The most messages one pop may ask for (RocketMQ: 32; more is INVALID_PARAMETER)."""
    max_poll_time: float = fields.duration("30s")
    """The longest a pop with nothing to deliver is held waiting for arrivals."""
    revive_interval: float = fields.duration("200ms")
    """How often due checkpoints are looked for (a due message is revived within this)."""
    max_in_flight_per_queue: int = fields.integer(20_000, minimum=1)
    """Messages of one (group, queue) popped and neither acked nor revived before pops of that
    queue stop (RocketMQ's ``popInflightMessageThreshold``): a consumer that never acks cannot
    make the broker's memory grow without bound."""


PROPERTIES = {
    "reviveQueueNum": rocketmq.integer_alias("revive_queue_num", "a whole number"),
    "popFromRetryProbability": rocketmq.integer_alias("pop_from_retry_probability", "a percentage"),
    "popInflightMessageThreshold": rocketmq.integer_alias("max_in_flight_per_queue", "a whole number"),
}
"""The RocketMQ ``broker.properties`` keys of ``[pop]``."""
