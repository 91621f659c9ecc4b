"""trocket.PushConsumer against a real `trocket up` process: what a RocketMQ user relies on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from tests.client.consumer_helpers import Collector, eventually, produce
from tests.interop.conftest import subprocess_env
from trocket import (
    ConsumeFromWhere,
    ConsumeStatus,
    InvalidMessage,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
)

APP = Path(__file__).with_name("consumer_app.py")


def first(group: str, namesrv: str, **options) -> PushConsumer:
    return PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **options)


async def test_a_clean_run_delivers_every_message_exactly_once_and_commits(broker):
    sent = await produce(broker.namesrv, "CleanRun", 400)
    collector = Collector()
    consumer = first("CG_clean", broker.namesrv, consume_thread_max=8, consume_message_batch_max_size=4)
    consumer.subscribe("CleanRun")
    consumer.register_listener(collector)
    async with consumer:
        await collector.wait_for(400)
        await trio.sleep(1.0)  # nothing more may come
    assert collector.bodies == Counter(sent)
    assert all(count == 1 for count in collector.bodies.values())
    progress = broker.admin_json("consumerProgress", "-g", "CG_clean")
    rows = [r for r in progress if r["#Topic"] == "CleanRun"]
    assert rows and all(r["#Diff"] == 0 for r in rows), rows


async def test_tag_expressions_select_messages(broker):
    async with Producer("PG_tags", broker.namesrv) as producer:
        for i in range(30):
            await producer.send(Message("Tagged", f"t{i}".encode(), tags="abc"[i % 3]))
    collector = Collector()
    consumer = first("CG_tags", broker.namesrv)
    consumer.subscribe("Tagged", "a || c")
    consumer.register_listener(collector)
    async with consumer:
        await collector.wait_for(20)
        await trio.sleep(0.5)
    assert {m.tags for m in collector.received} == {"a", "c"} and len(collector.received) == 20


def _start_app(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        app = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=subprocess_env())
    deadline = time.monotonic() + 60
    while b"started" not in log.read_bytes():
        assert time.monotonic() < deadline and app.poll() is None, log.read_text()
        time.sleep(0.05)
    return app


async def test_at_least_once_across_a_consumer_killed_with_sigkill(broker, tmp_path):
    sent = {b.decode() for b in await produce(broker.namesrv, "KillNine", 1000)}
    out = tmp_path / "consumed.txt"
    command = [sys.executable, str(APP), broker.namesrv, "CG_kill", "KillNine", str(out)]
    app = _start_app([*command, "50"], tmp_path / "first.log")  # 4 workers x 50 ms: ~80 msgs/s
    try:
        deadline = time.monotonic() + 60
        while not out.exists() or len(out.read_text().splitlines()) < 600:  # ~7 s: offsets committed
            assert time.monotonic() < deadline and app.poll() is None
            await trio.sleep(0.05)
        app.send_signal(signal.SIGKILL)
        app.wait(timeout=30)
        before = out.read_text().splitlines()
        assert len(set(before)) < 1000, "the consumer finished before it was killed"
        app = _start_app([*command, "0"], tmp_path / "second.log")
        deadline = time.monotonic() + 120
        while not sent <= set(out.read_text().splitlines()):
            assert time.monotonic() < deadline and app.poll() is None, "messages missing after restart"
            await trio.sleep(0.1)
    finally:
        app.send_signal(signal.SIGTERM)
        app.wait(timeout=60)
    consumed = out.read_text().splitlines()
    assert set(consumed) == sent
    redelivered = len(consumed) - len(sent)
    assert redelivered < 600, "restarted from scratch instead of from the committed offset"


async def _settled(
    consumers, queues: int, sizes: list[int] | None = None, timeout: float = 30.0
) -> list[set]:
    """Wait until the consumers own disjoint shares covering ``queues`` user queues (of
    ``sizes``, when given: while members still disagree on who is in the group, a disjoint
    covering split such as 1/2/3 can show up on the way to the final one)."""
    shares: list[set] = []
    with trio.move_on_after(timeout):
        while True:
            shares = [{q for q in c.assigned_queues if not q.topic.startswith("%")} for c in consumers]
            covering = sum(len(s) for s in shares) == queues and len(set().union(*shares)) == queues
            if covering and (sizes is None or sorted(len(s) for s in shares) == sizes):
                return shares
            await trio.sleep(0.1)
    raise AssertionError(f"shares did not settle to {sizes or queues}: {[len(s) for s in shares]}")


async def test_clustering_spreads_queues_over_three_consumers_and_rebalances_when_one_leaves(broker):
    broker.admin("updateTopic", "-c", "DefaultCluster", "-t", "Spread6", "-w", "6", "-r", "6")
    collectors = [Collector() for _ in range(3)]
    consumers = []
    for i, collector in enumerate(collectors):
        consumer = first("CG_spread", broker.namesrv, instance_name=f"spread-{i}")
        consumer.subscribe("Spread6")
        consumer.register_listener(collector)
        await consumer.start()
        consumers.append(consumer)
    try:
        await _settled(consumers, 6, [2, 2, 2])
        sent = await produce(broker.namesrv, "Spread6", 60)
        await eventually(lambda: sum(len(c.received) for c in collectors) >= 60)
        assert all(c.received for c in collectors), "every member consumes its share"
        await consumers.pop().shutdown()
        await _settled(consumers, 6, [3, 3])  # rebalanced at once on NOTIFY_CONSUMER_IDS_CHANGED
        more = await produce(broker.namesrv, "Spread6", 60, prefix="after")
        await eventually(
            lambda: all(any(m.body == b for c in collectors[:2] for m in c.received) for b in more)
        )
        got = Counter(m.body for c in collectors for m in c.received)
        # At-least-once: a queue changing hands may repeat what was consumed since the last
        # commit (the new owner can read the offset before the old one commits), as in RocketMQ.
        assert all(got[b] >= 1 for b in sent + more)
        assert sum(got.values()) - len(got) <= 12
    finally:
        for consumer in reversed(consumers):  # nurseries close in the reverse order of opening
            await consumer.shutdown()


async def test_broadcasting_delivers_everything_to_every_instance(broker, tmp_path):
    collectors = [Collector(), Collector()]
    consumers = []
    for i, collector in enumerate(collectors):
        consumer = first(
            "CG_broadcast", broker.namesrv, message_model=MessageModel.BROADCASTING,
            instance_name=f"bc-{i}", offset_store_dir=tmp_path,
        )  # fmt: skip
        consumer.subscribe("Broadcast")
        consumer.register_listener(collector)
        consumers.append(consumer)
    await produce(broker.namesrv, "Broadcast", 1)  # the topic exists before the consumers start
    for consumer in consumers:
        await consumer.start()
    sent = await produce(broker.namesrv, "Broadcast", 40, prefix="b")
    try:
        for collector in collectors:
            await collector.wait_for(41)
    finally:
        for consumer in reversed(consumers):  # nurseries close in the reverse order of opening
            await consumer.shutdown()
    for collector in collectors:
        assert all(collector.bodies[b] == 1 for b in sent)
    files = sorted(tmp_path.glob("*/CG_broadcast/offsets.json"))
    assert len(files) == 2, "each instance keeps its own offsets"
    for file in files:
        rows = json.loads(file.read_text())["offsetTable"]
        assert sum(r["offset"] for r in rows) == 41


async def test_compressed_bodies_and_4mib_messages_round_trip(broker):
    compressible = b"trocket compresses bodies over 4 KiB " * 3000
    incompressible = os.urandom(4 * 1024 * 1024 - 512)
    async with Producer("PG_big", broker.namesrv, send_timeout=30) as producer:
        await producer.send(Message("BigBodies", compressible))
        await producer.send(Message("BigBodies", incompressible))
        with pytest.raises(InvalidMessage, match="the limit is 4194304"):
            await producer.send(Message("BigBodies", b"x" * (4 * 1024 * 1024 + 1)))
    collector = Collector()
    consumer = first("CG_big", broker.namesrv)
    consumer.subscribe("BigBodies")
    consumer.register_listener(collector)
    async with consumer:
        await collector.wait_for(2)
    bodies = sorted((m.body for m in collector.received), key=len)
    assert bodies == [compressible, incompressible]
    assert collector.received[0].sys_flag & 1 or collector.received[1].sys_flag & 1


async def test_a_new_group_can_start_at_a_timestamp(broker):
    await produce(broker.namesrv, "Timed", 20, prefix="old")
    await trio.sleep(1.2)
    start_ms = int(time.time() * 1000)
    newer = await produce(broker.namesrv, "Timed", 20, prefix="new")
    collector = Collector()
    consumer = PushConsumer(
        "CG_timed",
        broker.namesrv,
        consume_from_where=ConsumeFromWhere.TIMESTAMP,
        consume_timestamp_ms=start_ms,
    )
    consumer.subscribe("Timed")
    consumer.register_listener(collector)
    async with consumer:
        await collector.wait_for(20)
        await trio.sleep(0.5)
    assert collector.bodies == Counter(newer)


async def test_flow_control_stops_pulling_at_the_queue_threshold(broker):
    broker.admin("updateTopic", "-c", "DefaultCluster", "-t", "Flow1", "-w", "1", "-r", "1")
    await produce(broker.namesrv, "Flow1", 300)
    release = trio.Event()

    async def blocked(messages, context):
        await release.wait()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = first("CG_flow", broker.namesrv, pull_threshold_for_queue=50, consume_thread_max=2)
    consumer.subscribe("Flow1")
    consumer.register_listener(blocked)
    async with consumer:
        await trio.sleep(2.0)
        (stats,) = [s for q, s in consumer.queue_stats().items() if q.topic == "Flow1"]
        assert 50 <= stats.cached_messages < 50 + consumer.pull_batch_size
        assert stats.consumer_offset == 0, "nothing is committed while the first messages are in flight"
        release.set()

        def committed_all() -> bool:
            return [s.consumer_offset for q, s in consumer.queue_stats().items() if q.topic == "Flow1"] == [
                300
            ]

        await eventually(committed_all)
