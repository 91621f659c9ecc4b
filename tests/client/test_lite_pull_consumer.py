"""trocket.LitePullConsumer against a real `trocket up` process."""

from __future__ import annotations

import trio

from kernel.model import MessageQueue
from tests.client.consumer_helpers import produce
from trocket import ConsumeFromWhere, LitePullConsumer


async def poll_all(consumer: LitePullConsumer, count: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < count:
        batch = await consumer.poll(timeout=10)
        assert batch, f"poll returned nothing after {len(out)} of {count}"
        out += [m.body for m in batch]
    return out


async def test_subscribe_poll_commit_and_resume_in_a_new_consumer(broker):
    sent = await produce(broker.namesrv, "LiteTopic", 100)
    async with LitePullConsumer(
        "CG_lite", broker.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.subscribe("LiteTopic")
        first = await poll_all(consumer, 100)
        assert sorted(first) == sorted(sent) and len(set(first)) == 100
        await consumer.commit()
        queues = [q for q in consumer.assignment if q.topic == "LiteTopic"]
        assert sum([await consumer.committed(q) for q in queues]) == 100
    more = await produce(broker.namesrv, "LiteTopic", 10, prefix="more")
    async with LitePullConsumer("CG_lite", broker.namesrv) as consumer:
        consumer.subscribe("LiteTopic")
        assert sorted(await poll_all(consumer, 10)) == sorted(more)
        assert await consumer.poll(timeout=0.5) == []


async def test_assign_and_seek(broker):
    await produce(broker.namesrv, "LiteSeek", 40)
    async with LitePullConsumer(
        "CG_seek", broker.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        queues = await consumer.fetch_message_queues("LiteSeek")
        queue = queues[0]
        await consumer.assign([queue])
        assert consumer.assignment == [queue]
        bodies = await poll_all(consumer, 10)
        offsets_seen = len(bodies)
        await consumer.seek(queue, 3)
        again = await consumer.poll(timeout=10)
        assert again[0].queue_offset == 3 and again[0].queue == queue
        await consumer.seek_to_end(queue)
        assert await consumer.poll(timeout=0.5) == []
        await consumer.seek_to_begin(queue)
        assert (await consumer.poll(timeout=10))[0].queue_offset == 0
        assert offsets_seen == 10
        try:
            await consumer.seek(queue, 10_000)
        except Exception as error:  # noqa: BLE001
            assert "outside" in str(error)
        else:
            raise AssertionError("a seek past the end must be refused")
        other = MessageQueue("LiteSeek", queue.broker_name, queues[1].queue_id)
        try:
            await consumer.seek(other, 0)
        except Exception as error:  # noqa: BLE001
            assert "not assigned" in str(error)
        else:
            raise AssertionError("a seek on a queue not assigned must be refused")


async def test_auto_commit_writes_offsets_at_shutdown(broker):
    await produce(broker.namesrv, "LiteAuto", 20)
    async with LitePullConsumer(
        "CG_auto", broker.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("LiteAuto")
        await poll_all(consumer, 20)
        queues = [q for q in consumer.assignment if q.topic == "LiteAuto"]
    async with LitePullConsumer("CG_auto", broker.namesrv) as again:
        assert sum([await again.committed(q) for q in queues]) == 20


async def test_overlapping_subscriptions_never_deliver_a_message_twice(broker):
    """Subscribing to topics one after the other on a started consumer rebalances once per
    subscription, concurrently; each queue must still be pulled by one loop only."""
    topics = [f"LiteOverlap{i}" for i in range(4)]
    sent = []
    for topic in topics:
        sent += await produce(broker.namesrv, topic, 8, prefix=topic)
    async with LitePullConsumer(
        "CG_overlap", broker.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        for topic in topics:
            consumer.subscribe(topic)
        got = await poll_all(consumer, len(sent))
        got += await consumer.poll(timeout=1.0)
    assert sorted(got) == sorted(sent)


async def test_a_shutdown_at_any_point_after_subscribing_ends_cleanly(broker):
    """Subscribing starts background work (announcing the topic, then one pull loop per queue
    taken); a shutdown may come before any of it first runs, and must neither fail nor leave
    a task behind. The consumer is closed after 0, 1, 2, ... scheduler passes."""
    await produce(broker.namesrv, "LiteQuick", 8)
    for passes in (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89):
        async with LitePullConsumer(
            "CG_quick", broker.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
        ) as consumer:
            consumer.subscribe("LiteQuick")
            for _ in range(passes):
                await trio.lowlevel.checkpoint()
