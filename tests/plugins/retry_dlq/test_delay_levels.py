"""Delay levels end to end on a running broker: parked in SCHEDULE_TOPIC_XXXX, invisible until
due, delivered with the original body and keys, progress in delayOffset.json."""

from __future__ import annotations

import json

import trio

from kernel import Message, MessageBatch, pull
from kernel.model import SCHEDULE_TOPIC, GetStatus, PutStatus, Redelivery
from plugins.retry_dlq import SCHEDULER
from wire import record

SHORT_LEVELS = {"message_delay_level": "1s 2s"}


async def _put(broker, body: bytes, level: int) -> None:
    props = {"DELAY": str(level), "KEYS": "order-7", "TAGS": "TagA"}
    result = await broker.put(MessageBatch([Message("Orders", body, queue_id=1, properties=props)]))
    assert result.status is PutStatus.PUT_OK


async def _visible(broker) -> list:
    got = await pull.get_messages(broker.store, "Orders", 1, 0, max_count=32)
    return [record.decode_record(r) for r in got.records] if got.status is GetStatus.FOUND else []


async def _wait_visible(broker) -> list:
    """Poll the real topic (the scheduler has no event to wait on from outside)."""
    for _ in range(400):
        if delivered := await _visible(broker):
            return delivered
        await trio.sleep(0.025)
    raise AssertionError("the delayed message was never delivered")


async def test_a_delayed_message_is_invisible_until_due_then_delivered_intact(broker_factory):
    async with broker_factory(plugins=["retry_dlq"], broker=SHORT_LEVELS) as broker:
        started = trio.current_time()
        await _put(broker, b"pay later", level=2)
        await broker.wait_dispatched()
        assert broker.store.max_queue_offset(SCHEDULE_TOPIC, 1) == 1, "parked in queue level-1"
        await trio.sleep(1.0)
        assert await _visible(broker) == [], "level 2 (2 s) must not be visible after 1 s"
        delivered = await _wait_visible(broker)
        assert trio.current_time() - started >= 1.995  # whole-millisecond due times
        (message,) = delivered
        assert message.body == b"pay later" and message.keys == ["order-7"] and message.tags == "TagA"
        assert "DELAY" not in message.properties and "REAL_TOPIC" not in message.properties
        (level1, level2) = broker.ctx.stash[SCHEDULER].progress()
        assert (level2.next_offset, level2.pending, level2.delivered) == (1, 0, 1)
        assert level1.pending == 0


async def test_levels_above_the_maximum_are_clamped(broker_factory):
    async with broker_factory(plugins=["retry_dlq"], broker=SHORT_LEVELS) as broker:
        await _put(broker, b"far future", level=99)
        await broker.wait_dispatched()
        assert broker.store.max_queue_offset(SCHEDULE_TOPIC, 1) == 1


async def test_progress_is_persisted_at_shutdown_and_reloaded(broker_factory, tmp_path):
    async with broker_factory(plugins=["retry_dlq"], broker=SHORT_LEVELS) as broker:
        await _put(broker, b"one", level=1)
        await _wait_visible(broker)
    saved = json.loads((tmp_path / "data" / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 1, "2": 0}}


def test_default_redelivery_schedule_is_level_three_plus_reconsume_times_then_dlq():
    from plugins.retry_dlq import trocket_redelivery_decision

    class Ctx:
        class broker:
            message_delay_level = tuple(range(18))

    decide = trocket_redelivery_decision
    assert decide(message=None, group="g", attempt=1, max_attempts=16, ctx=Ctx) == Redelivery.retry(3)
    assert decide(message=None, group="g", attempt=5, max_attempts=16, ctx=Ctx) == Redelivery.retry(7)
    assert decide(message=None, group="g", attempt=16, max_attempts=16, ctx=Ctx) == Redelivery.retry(18)
    assert decide(message=None, group="g", attempt=17, max_attempts=16, ctx=Ctx) == Redelivery.dead_letter()


async def test_an_idle_level_is_woken_by_a_parked_message_not_by_polling(broker_factory):
    """With the safety poll at an hour, only the arrival's wake-up can deliver the message on
    time: the level was idle (nothing parked) when it was put."""
    async with broker_factory(
        plugins=["retry_dlq"], broker=SHORT_LEVELS, retry_dlq={"poll_interval": "1h"}
    ) as broker:
        await trio.sleep(0.2)  # every level has looked at its empty queue and sleeps
        started = trio.current_time()
        await _put(broker, b"woken", level=1)
        (message,) = await _wait_visible(broker)
        assert message.body == b"woken"
        assert 0.99 <= trio.current_time() - started < 5
