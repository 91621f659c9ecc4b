"""Orderly consumption under broker queue locks, and what happens to messages a listener
rejects: the retry topic, the republish fallback, local retries, consumeTimeout."""

from __future__ import annotations

from collections import defaultdict

import trio

from kernel import hookimpl
from tests.client.consumer_helpers import Collector, eventually, produce
from trocket import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    OrderlyStatus,
    Producer,
    PushConsumer,
    select_by_hash,
)

LEVELS = {"message_delay_level": "1s 1s 1s 1s 1s 1s"}


def first(group: str, namesrv: str, **options) -> PushConsumer:
    return PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **options)


async def test_an_orderly_listener_keeps_each_queue_in_order_while_a_second_consumer_joins(broker):
    broker.admin("updateTopic", "-c", "DefaultCluster", "-t", "Ordered4", "-w", "4", "-r", "4")
    keys, steps = 8, 30
    async with Producer("PG_order", broker.namesrv) as producer:
        for step in range(steps):
            for key in range(keys):
                message = Message("Ordered4", f"k{key}:{step}".encode())
                await producer.send(message, selector=select_by_hash, arg=f"k{key}")
    consumed: list[tuple[str, object, int, bytes]] = []
    busy: set[object] = set()
    overlaps: list[object] = []

    def listener_for(name: str):
        async def listener(messages, context):
            if context.queue in busy:
                overlaps.append(context.queue)
            busy.add(context.queue)
            await trio.sleep(0.02)
            consumed.extend((name, m.queue, m.queue_offset, m.body) for m in messages)
            busy.discard(context.queue)
            return OrderlyStatus.SUCCESS

        return listener

    consumers = []
    for name in ("a", "b"):
        consumer = first("CG_order", broker.namesrv, instance_name=f"order-{name}", rebalance_interval=2)
        consumer.subscribe("Ordered4")
        consumer.register_listener(listener_for(name), orderly=True)
        consumers.append(consumer)
    async with consumers[0]:
        await eventually(lambda: len(consumed) >= 40)
        async with consumers[1]:
            await eventually(lambda: len({c[3] for c in consumed}) == keys * steps, timeout=60)
            await trio.sleep(0.5)
    assert not overlaps, "a queue was consumed by two listeners at once"
    by_consumer = {name for name, *_ in consumed}
    assert by_consumer == {"a", "b"}, "the second consumer took over queues"
    per_key: dict[str, list[int]] = defaultdict(list)
    for _, _, _, body in consumed:
        key, step = body.decode().split(":")
        per_key[key].append(int(step))
    assert all(sequence == list(range(steps)) for sequence in per_key.values()), per_key


async def test_reconsume_later_retries_through_the_retry_topic(broker):
    attempts: list[tuple[int, str, str]] = []
    done = trio.Event()

    async def listener(messages, context):
        (message,) = messages
        attempts.append((message.reconsume_times, message.topic, message.msg_id))
        if message.reconsume_times < 2:
            return ConsumeStatus.RECONSUME_LATER
        done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    async with Producer("PG_retry", broker.namesrv) as producer:
        sent = await producer.send(Message("RetryMe", b"flaky", tags="t"))
    consumer = first("CG_retry", broker.namesrv)
    consumer.subscribe("RetryMe")
    consumer.register_listener(listener)
    async with consumer:
        with trio.fail_after(30):
            await done.wait()
    assert attempts == [(0, "RetryMe", sent.msg_id), (1, "RetryMe", sent.msg_id), (2, "RetryMe", sent.msg_id)]


async def test_a_listener_over_its_consume_timeout_is_retried(broker):
    seen: list[int] = []
    done = trio.Event()

    async def slow_first_time(messages, context):
        seen.append(messages[0].reconsume_times)
        if messages[0].reconsume_times == 0:
            await trio.sleep(30)
        done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    await produce(broker.namesrv, "SlowOnce", 1)
    consumer = first("CG_slow", broker.namesrv, consume_timeout=0.5)
    consumer.subscribe("SlowOnce")
    consumer.register_listener(slow_first_time)
    async with consumer:
        with trio.fail_after(20):
            await done.wait()
    assert seen == [0, 1]


def test_a_sync_listener_runs_in_a_worker_thread(broker):
    """A blocking (non-async) listener, as most applications write one."""
    import time as blocking_time

    received: list[bytes] = []

    def listener(messages, context):
        blocking_time.sleep(0.01)
        received.extend(m.body for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    async def main() -> None:
        sent = await produce(broker.namesrv, "SyncListener", 20)
        consumer = first("CG_sync", broker.namesrv, consume_thread_max=4)
        consumer.subscribe("SyncListener")
        consumer.register_listener(listener)
        async with consumer:
            await eventually(lambda: len(received) >= 20)
        assert sorted(received) == sorted(sent)

    trio.run(main)


class RefuseSendBack:
    """Makes the broker fail CONSUMER_SEND_MSG_BACK (the decision hook raises)."""

    @hookimpl(tryfirst=True)
    def trocket_redelivery_decision(self, message, group, attempt, max_attempts):
        raise RuntimeError("send-back refused by the test plugin")


async def test_when_send_back_fails_the_client_republishes_to_the_retry_topic(cluster_factory):
    plugins = [("refuse_send_back", RefuseSendBack())]
    async with cluster_factory(plugins=["retry_dlq"], broker=LEVELS, plugin_objects=plugins) as cluster:
        await produce(cluster.namesrv_addr, "Republish", 1, prefix="again")
        collector = Collector(ConsumeStatus.RECONSUME_LATER)
        consumer = first("CG_republish", cluster.namesrv_addr)
        consumer.subscribe("Republish")
        consumer.register_listener(collector)
        async with consumer:
            await collector.wait_for(2, timeout=20)
        first_try, retried = collector.received[:2]
        assert retried.queue.topic == "%RETRY%CG_republish" and retried.topic == "Republish"
        assert (retried.body, retried.reconsume_times, retried.msg_id) == (b"again0", 1, first_try.msg_id)


async def test_without_any_retry_path_a_rejected_message_is_consumed_again_locally(cluster_factory):
    async with cluster_factory() as cluster:  # no retry_dlq: send-back and delayed republish refused
        await produce(cluster.namesrv_addr, "LocalRetry", 1, prefix="stuck")
        collector = Collector(ConsumeStatus.RECONSUME_LATER)
        consumer = first("CG_local", cluster.namesrv_addr)
        consumer.subscribe("LocalRetry")
        consumer.register_listener(collector)
        async with consumer:
            await collector.wait_for(2, timeout=20)
            stats = [s for q, s in consumer.queue_stats().items() if q.topic == "LocalRetry"]
        assert [m.reconsume_times for m in collector.received[:2]] == [0, 1]
        assert [s.consumer_offset for s in stats if s.cached_messages] == [0], "not committed past it"
