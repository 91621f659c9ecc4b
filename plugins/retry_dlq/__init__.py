"""retry_dlq: delay levels, scheduled delivery, consumer retries and dead-letter queues.

- ``trocket_before_append``: a message with a delay level is parked in
  ``SCHEDULE_TOPIC_XXXX`` (queue ``level - 1``, delivery time in the consume-queue tag field).
- a SCHEDULING-phase service delivers due messages to their real topic, one task per level,
  with progress in ``config/delayOffset.json``.
- ``trocket_redelivery_decision`` (``trylast``): RocketMQ's retry schedule for messages a
  consumer sent back: delay level ``3 + reconsumeTimes`` until ``maxReconsumeTimes``, then the
  dead-letter queue. A plugin registered ``tryfirst`` overrides it.

Settings: ``[broker] message_delay_level`` (``messageDelayLevel``) and ``[retry_dlq]``.
"""

from __future__ import annotations

import time

from kernel import ConfigSection, Phase, Redelivery, ServiceSpec, hookimpl
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from kernel.model import (
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    DispatchRecord,
    MessageBatch,
    PutStatus,
    Rejection,
)
from plugins.retry_dlq.config import RetryDlqConfig
from plugins.retry_dlq.parking import park
from plugins.retry_dlq.scheduler import DelayScheduler

__all__ = ["SCHEDULER", "DelayScheduler", "RetryDlqConfig"]

SCHEDULER = StashKey[DelayScheduler]("retry_dlq.scheduler")
RETRY_BASE_LEVEL = 3
"""Retries start at level 3 (10 s with the default levels): RocketMQ's ``3 + reconsumeTimes``."""


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("retry_dlq", RetryDlqConfig)]


@hookimpl
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    levels = ctx.broker.message_delay_level
    now_ms = 0
    for message in batch.messages:
        if PROPERTY_TIMER_DELIVER_MS in message.properties or PROPERTY_TIMER_DELAY_MS in message.properties:
            # Not built yet: refuse clearly rather than deliver at the wrong time.
            return Rejection(
                PutStatus.SERVICE_NOT_AVAILABLE,
                "arbitrary-time delays (TIMER_DELIVER_MS / TIMER_DELAY_MS) are not supported by "
                "this broker yet; use a delay level (DELAY)",
            )
        if message.delay_level > 0:
            now_ms = now_ms or int(time.time() * 1000)
            park(message, levels, now_ms)
    return None


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> DelayScheduler:
        scheduler = DelayScheduler(
            runtime,
            runtime.ctx.broker.message_delay_level,
            runtime.ctx.plugin_config(RetryDlqConfig),
            runtime.ctx.data_dir / "config" / "delayOffset.json",
        )
        runtime.ctx.stash[SCHEDULER] = scheduler
        return scheduler

    return [ServiceSpec("retry_dlq.scheduler", Phase.SCHEDULING, make)]


@hookimpl(trylast=True)
def trocket_redelivery_decision(
    message: DispatchRecord, group: str, attempt: int, max_attempts: int, ctx: BrokerContext
) -> Redelivery:
    """``attempt`` counts failures including this one (reconsume times + 1)."""
    if attempt > max_attempts:
        return Redelivery.dead_letter()
    levels = len(ctx.broker.message_delay_level)
    return Redelivery.retry(min(RETRY_BASE_LEVEL + attempt - 1, levels))
