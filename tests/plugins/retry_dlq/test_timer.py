"""Arbitrary-time delays (RocketMQ 5's TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC):
parked in rmq_sys_wheel_timer, delivered in time order within a second of their time, durable
across restarts, refused clearly when illegal."""

from __future__ import annotations

import json
import random
import time

import pytest
import trio

from kernel import Message, MessageBatch, pull
from kernel.model import TIMER_TOPIC, GetStatus, PutStatus
from plugins.retry_dlq import TIMER
from wire import record

TOPIC = "Timed"
MMAP = {"plugins": ["store_mmap", "retry_dlq"], "store": "mmap"}
MMAP_TABLE = {"commit_log_file_size": "1MiB", "consume_queue_file_size": 6000}


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _put(broker, body: bytes, **properties: str) -> PutStatus:
    message = Message(TOPIC, body, queue_id=0, properties={"KEYS": "k-" + body.decode(), **properties})
    result = await broker.put(MessageBatch([message]))
    return result


async def _delivered(broker) -> list:
    got = await pull.get_messages(broker.store, TOPIC, 0, 0, max_count=1000)
    return [record.decode_record(r) for r in got.records] if got.status is GetStatus.FOUND else []


async def _wait_for(broker, count: int, seconds: float = 15.0) -> list:
    """Poll the real topic (delivery has no event a test could wait on)."""
    for _ in range(int(seconds / 0.02)):
        if len(delivered := await _delivered(broker)) >= count:
            return delivered
        await trio.sleep(0.02)
    raise AssertionError(f"only {len(await _delivered(broker))} of {count} timed messages were delivered")


async def test_a_timed_message_is_parked_then_delivered_intact(broker_factory):
    async with broker_factory(plugins=["retry_dlq"]) as broker:
        asked = _now_ms() + 1500
        result = await _put(broker, b"wake-up", TIMER_DELIVER_MS=str(asked), TAGS="T1")
        assert result.status is PutStatus.PUT_OK
        await broker.wait_dispatched()
        assert broker.store.max_queue_offset(TIMER_TOPIC, 0) == 1, "parked in the timer topic"
        await trio.sleep(0.7)
        assert await _delivered(broker) == [], "not visible before its time"
        (message,) = await _wait_for(broker, 1)
        assert asked <= message.store_timestamp <= asked + 1000, "delivered within a second of its time"
        assert message.body == b"wake-up" and message.keys == ["k-wake-up"] and message.tags == "T1"
        for name in ("TIMER_DELIVER_MS", "TIMER_OUT_MS", "REAL_TOPIC", "REAL_QID"):
            assert name not in message.properties
        progress = broker.ctx.stash[TIMER].progress()
        assert (progress.pending, progress.delivered, progress.enqueue_offset) == (0, 1, 1)


async def test_timed_messages_fire_in_time_order_and_on_time(broker_factory):
    async with broker_factory(**MMAP, store_mmap=MMAP_TABLE) as broker:
        base = _now_ms() + 1000
        due = {f"m{i:02d}": base + i * 37 % 1500 for i in range(40)}
        names = list(due)
        random.Random(7).shuffle(names)  # parked in an order unrelated to their times
        for i, name in enumerate(names):
            field = "TIMER_DELIVER_MS" if i % 2 else "TIMER_DELAY_MS"
            value = due[name] if i % 2 else due[name] - _now_ms()
            assert (await _put(broker, name.encode(), **{field: str(value)})).status is PutStatus.PUT_OK
        delivered = await _wait_for(broker, len(due))
        order = [m.body.decode() for m in delivered]
        assert order == sorted(due, key=lambda n: (due[n], names.index(n))), "delivered in time order"
        for message in delivered:
            asked = due[message.body.decode()]
            assert asked - 5 <= message.store_timestamp <= asked + 1000, (message.body, asked)


async def test_delay_in_seconds_and_past_times(broker_factory):
    async with broker_factory(plugins=["retry_dlq"]) as broker:
        assert (await _put(broker, b"past", TIMER_DELIVER_MS=str(_now_ms() - 60_000))).status.stored
        await broker.wait_dispatched()
        (past,) = await _delivered(broker)
        assert past.body == b"past" and "TIMER_DELIVER_MS" not in past.properties, "due already: at once"
        before = _now_ms()
        assert (await _put(broker, b"one-second", TIMER_DELAY_SEC="1")).status.stored
        (_, later) = await _wait_for(broker, 2)
        assert later.store_timestamp >= before + 1000


@pytest.mark.parametrize(
    ("properties", "words"),
    [
        ({"TIMER_DELAY_MS": str(3 * 86_400_000 + 60_000)}, ["maximum delay 3d", "TIMER_DELAY_MS"]),
        ({"TIMER_DELAY_MS": "soon"}, ["TIMER_DELAY_MS must be a whole number", "'soon'"]),
        ({"TIMER_DELAY_MS": "-5"}, ["must not be negative"]),
        ({"TIMER_DELAY_MS": "5000", "DELAY": "2"}, ["set one of DELAY"]),
        ({"TIMER_DELAY_MS": "5000", "TIMER_DELIVER_MS": "1"}, ["set one of DELAY"]),
    ],
)
async def test_illegal_timers_are_refused_with_the_reason(broker_factory, properties, words):
    async with broker_factory(plugins=["retry_dlq"]) as broker:
        result = await _put(broker, b"x", **properties)
        assert result.status is PutStatus.MESSAGE_ILLEGAL
        for word in words:
            assert word in result.remark
        assert broker.store.max_queue_offset(TIMER_TOPIC, 0) == 0 and await _delivered(broker) == []


async def test_the_maximum_delay_is_configurable(broker_factory):
    async with broker_factory(plugins=["retry_dlq"], retry_dlq={"timer_max_delay": "10s"}) as broker:
        refused = await _put(broker, b"x", TIMER_DELAY_MS="11000")
        assert refused.status is PutStatus.MESSAGE_ILLEGAL and "10s" in refused.remark
        assert (await _put(broker, b"y", TIMER_DELAY_MS="9000")).status is PutStatus.PUT_OK


async def test_pending_timers_survive_a_restart_and_nothing_is_delivered_twice(broker_factory, tmp_path):
    async with broker_factory(**MMAP, store_mmap=MMAP_TABLE) as broker:
        start = _now_ms()
        for i in range(10):  # five due at once, five after the restart
            delay = 100 if i < 5 else 2500 + i * 10
            assert (await _put(broker, f"r{i}".encode(), TIMER_DELAY_MS=str(delay))).status.stored
        await _wait_for(broker, 5)
    saved = json.loads((tmp_path / "data" / "config" / "timerProgress.json").read_text())
    assert saved["enqueueOffset"] == 10 and saved["lowOffset"] == 5
    async with broker_factory(**MMAP, store_mmap=MMAP_TABLE) as broker:
        assert broker.ctx.stash[TIMER].progress().pending == 5
        delivered = await _wait_for(broker, 10)
        assert [m.body for m in delivered] == [f"r{i}".encode() for i in range(10)], "each exactly once"
        assert all(m.store_timestamp >= start + 2500 for m in delivered[5:])
        await trio.sleep(0.3)
        assert len(await _delivered(broker)) == 10


async def test_an_idle_timer_is_woken_by_a_parked_message_even_an_earlier_one(broker_factory):
    """With the safety poll at an hour, only the arrivals wake the timer: first while nothing is
    pending, then with a later message pending (the new one is due before the heap's head)."""
    async with broker_factory(plugins=["retry_dlq"], retry_dlq={"poll_interval": "1h"}) as broker:
        await trio.sleep(0.2)  # the timer has looked at its empty queue and sleeps
        assert (await _put(broker, b"late", TIMER_DELAY_MS="600000")).status.stored
        await trio.sleep(0.2)  # it now sleeps until the late one is due, ten minutes away
        before = _now_ms()
        assert (await _put(broker, b"soon", TIMER_DELAY_MS="500")).status.stored
        (message,) = await _wait_for(broker, 1, seconds=5)
        assert message.body == b"soon" and message.store_timestamp >= before + 500
        assert TIMER in broker.ctx.stash and broker.ctx.stash[TIMER].progress().pending == 1
