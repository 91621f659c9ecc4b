"""retry_dlq: delay levels, scheduled delivery, consumer retries and dead-letter queues.

- ``trocket_before_append``: a message with a delay level is parked in
  ``SCHEDULE_TOPIC_XXXX`` (queue ``level - 1``), one with an arbitrary time (``TIMER_DELIVER_MS``,
  ``TIMER_DELAY_MS``, ``TIMER_DELAY_SEC``) in ``rmq_sys_wheel_timer``; the delivery time goes to
  the consume-queue tag field (both are declared with ``trocket_register_parking_topics``).
- two SCHEDULING-phase services deliver due messages to their real topic: one task per delay
  level (progress in ``config/delayOffset.json``) and the timer (``config/timerProgress.json``);
  ``trocket_records_dispatched`` wakes an idle one when a message is parked for it.
- ``trocket_redelivery_decision`` (``trylast``): RocketMQ's retry schedule for messages a
  consumer sent back: delay level ``3 + reconsumeTimes`` until ``maxReconsumeTimes``, then the
  dead-letter queue. A plugin registered ``tryfirst`` overrides it.

Settings: ``[broker] message_delay_level`` (``messageDelayLevel``) and ``[retry_dlq]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel import ConfigSection, Phase, Redelivery, ServiceSpec, hookimpl
from kernel.clock import steady_ms
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from kernel.model import SCHEDULE_TOPIC, TIMER_TOPIC, DispatchRecord, MessageBatch, PutStatus, Rejection
from plugins.retry_dlq.config import PROPERTIES, RetryDlqConfig
from plugins.retry_dlq.parking import IllegalDelay, park, park_timer, timer_delivery_ms
from plugins.retry_dlq.scheduler import DelayScheduler
from plugins.retry_dlq.timer import TimerScheduler
from wire.units import format_duration

__all__ = ["SCHEDULER", "TIMER", "DelayScheduler", "RetryDlqConfig", "TimerScheduler"]

SCHEDULER = StashKey[DelayScheduler]("retry_dlq.scheduler")
TIMER = StashKey[TimerScheduler]("retry_dlq.timer")
RETRY_BASE_LEVEL = 3
"""Retries start at level 3 (10 s with the default levels): RocketMQ's ``3 + reconsumeTimes``."""


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("retry_dlq", RetryDlqConfig, PROPERTIES)]


@hookimpl
def trocket_register_parking_topics() -> tuple[str, ...]:
    return (SCHEDULE_TOPIC, TIMER_TOPIC)


@hookimpl
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    """Park every delayed message of the batch; one illegal delay refuses the whole batch."""
    if not batch.needs_attention():
        return None  # no message asks for a delay (an encoded batch stays columns)
    levels = ctx.broker.message_delay_level
    max_delay = ctx.plugin_config(RetryDlqConfig).timer_max_delay
    now_ms = steady_ms()
    for message in batch.messages:
        if message.is_prepared:
            continue  # a transactional half message is delayed when it commits, not before
        try:
            deliver_ms = timer_delivery_ms(message, now_ms, max_delay)
        except IllegalDelay as error:
            return Rejection(PutStatus.MESSAGE_ILLEGAL, str(error))
        if deliver_ms is not None:
            park_timer(message, deliver_ms, now_ms)
        elif message.delay_level > 0:
            park(message, levels, now_ms)
    return None


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make_scheduler(runtime: BrokerRuntime) -> DelayScheduler:
        scheduler = DelayScheduler(
            runtime,
            runtime.ctx.broker.message_delay_level,
            runtime.ctx.plugin_config(RetryDlqConfig),
            runtime.ctx.data_dir / "config" / "delayOffset.json",
        )
        runtime.ctx.stash[SCHEDULER] = scheduler
        return scheduler

    def make_timer(runtime: BrokerRuntime) -> TimerScheduler:
        timer = TimerScheduler(
            runtime,
            runtime.ctx.plugin_config(RetryDlqConfig),
            runtime.ctx.data_dir / "config" / "timerProgress.json",
        )
        runtime.ctx.stash[TIMER] = timer
        return timer

    return [
        ServiceSpec("retry_dlq.scheduler", Phase.SCHEDULING, make_scheduler),
        ServiceSpec("retry_dlq.timer", Phase.SCHEDULING, make_timer),
    ]


@hookimpl
def trocket_records_dispatched(records: Sequence[DispatchRecord], ctx: BrokerContext) -> None:
    """Wake the delay level or timer waiting for a message parked in these records."""
    if (scheduler := ctx.stash.get(SCHEDULER, None)) is not None:
        scheduler.arrivals.notify(records)
    if (timer := ctx.stash.get(TIMER, None)) is not None:
        timer.arrivals.notify(records)


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    """RocketMQ's ``scheduleMessageOffset_<level>`` (``next,max``) per level, the levels, and
    the timer's figures (``timerPending``, ``timerNextDeliverMs``, ``timerOffsetBehind``)."""
    levels = ctx.broker.message_delay_level
    figures = {"messageDelayLevel": " ".join(format_duration(delay) for delay in levels)}
    if (scheduler := ctx.stash.get(SCHEDULER, None)) is not None:
        levels_progress = scheduler.progress()
        for level in levels_progress:
            figures[f"scheduleMessageOffset_{level.level}"] = f"{level.next_offset},{level.max_offset}"
        figures["scheduleDroppedNoRealTopic"] = str(sum(level.dropped for level in levels_progress))
    if (timer := ctx.stash.get(TIMER, None)) is not None:
        progress = timer.progress()
        figures["timerPending"] = str(progress.pending)
        figures["timerNextDeliverMs"] = str(progress.next_deliver_ms or 0)
        figures["timerOffsetBehind"] = str(progress.max_offset - progress.enqueue_offset)
        figures["timerDelivered"] = str(progress.delivered)
        figures["timerDroppedNoRealTopic"] = str(progress.dropped)
    return figures


@hookimpl(trylast=True)
def trocket_redelivery_decision(
    message: DispatchRecord, group: str, attempt: int, max_attempts: int, ctx: BrokerContext
) -> Redelivery:
    """``attempt`` counts failures including this one (reconsume times + 1)."""
    if attempt > max_attempts:
        return Redelivery.dead_letter()
    levels = len(ctx.broker.message_delay_level)
    return Redelivery.retry(min(RETRY_BASE_LEVEL + attempt - 1, levels))
