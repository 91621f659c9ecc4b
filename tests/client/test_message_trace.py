"""Message trace (issue 37) as a RocketMQ 4.x user turns it on: a broker with
``traceTopicEnable``, a traced producer and traced consumers, then ``trocket admin
queryMsgTraceById`` showing who sent the message and each group's consumption; traces in the
format older Java clients write are read too, and tracing never costs a send."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio

from tests.client.consumer_helpers import Collector
from tests.interop.conftest import RunningBroker, start_broker, subprocess_env
from trocket import ConsumeFromWhere, ConsumeStatus, LitePullConsumer, Message, Producer, PushConsumer
from trocket.client.trace import TraceDispatcher, split_messages
from wire.trace_data import TRACE_TOPIC, TraceRecord, TraceType, record_text

TOPIC = "TracedOrders"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    running = start_broker(
        tmp_path_factory.mktemp("trace"),
        'message_delay_level = "1s 1s 1s 1s 1s 1s"',
        tables='[remoting]\ntrace_topic_enable = true\nregion_id = "eu-test"\n',
    )
    try:
        running.admin("updateTopic", "-b", running.broker, "-t", TOPIC, "-r", "2", "-w", "2")
        yield running
    finally:
        running.stop()


async def trace_rows(broker: RunningBroker, msg_id: str, count: int, *options: str) -> list[dict]:
    """``queryMsgTraceById --json`` once it shows ``count`` rows (a trace message is found by
    key once the broker has indexed it, a moment after it was stored)."""
    with trio.fail_after(20):
        while True:
            rows = await trio.to_thread.run_sync(
                broker.admin_json, "queryMsgTraceById", "-i", msg_id, *options
            )
            if len(rows) >= count:
                return rows
            await trio.sleep(0.2)


class FailOnce(Collector):
    """Asks for a retry the first time it sees a body, then succeeds."""

    async def __call__(self, messages, context):
        seen = {m.body for m in self.received}
        self.received.extend(messages)
        self._changed.set()
        if any(m.body not in seen for m in messages):
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS


async def consume(namesrv: str, group: str, listener: Collector, count: int) -> None:
    consumer = PushConsumer(
        group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, trace=True,
        consume_message_batch_max_size=1,
    )  # fmt: skip
    consumer.subscribe(TOPIC)
    consumer.register_listener(listener)
    async with consumer:
        await listener.wait_for(count)
        await trio.sleep(0.2)  # the last listener call returns and is traced


async def test_a_traced_message_shows_its_send_and_each_groups_consumption(broker):
    route = broker.admin_json("topicRoute", "-t", TRACE_TOPIC)
    assert [q["writeQueueNums"] for q in route["queueDatas"]] == [1], "traceTopicEnable made the topic"

    async with Producer("PG_traced", broker.namesrv, trace=True) as producer:
        sent = [
            await producer.send(Message(TOPIC, f"order {i}".encode(), tags="paid", keys=[f"order-{i}"]))
            for i in range(5)
        ]
        batch = await producer.send_batch([Message(TOPIC, f"bulk {i}".encode()) for i in range(3)])
    traced = sent[2].msg_id

    await consume(broker.namesrv, "CG_trace_ok", Collector(), 8)
    retried = FailOnce()
    await consume(broker.namesrv, "CG_trace_retry", retried, 16)

    rows = await trace_rows(broker, traced, 7)  # Pub, and a SubBefore and SubAfter per delivery
    pub = [r for r in rows if r["#Type"] == "Pub"]
    assert len(pub) == 1
    assert pub[0]["#Group"] == "PG_traced" and pub[0]["#Status"] == "success"
    assert pub[0]["topic"] == TOPIC and pub[0]["tags"] == "paid" and pub[0]["keys"] == "order-2"
    assert pub[0]["offsetMsgId"] == sent[2].offset_msg_id and pub[0]["storeHost"] == broker.broker
    consumed = {(r["#Group"], r["#Status"], r["retryTimes"]) for r in rows if r["#Type"] == "SubAfter"}
    assert consumed == {
        ("CG_trace_ok", "success", 0),
        ("CG_trace_retry", "failed", 0),
        ("CG_trace_retry", "success", 1),
    }
    assert all(r["#ClientHost"] for r in rows)
    assert [r["#Time"] for r in rows] == sorted(r["#Time"] for r in rows)

    # Each message of a batch has its own Pub record, keyed by its own id.
    for msg_id in batch.msg_id.split(","):
        rows = await trace_rows(broker, msg_id, 1)
        assert [r["#Type"] for r in rows if r["#Type"] == "Pub"] == ["Pub"]

    # mqadmin's tables.
    table = broker.admin("queryMsgTraceById", "-i", traced).stdout
    lines = table.splitlines()
    assert lines[0].split() == [
        "#Type",
        "#ProducerGroup",
        "#ClientHost",
        "#SendTime",
        "#CostTimes",
        "#Status",
    ]
    assert lines[1].split()[0:2] == ["Pub", "PG_traced"] and lines[1].split()[-1] == "success"
    consumer_headers = [i for i, line in enumerate(lines) if line.startswith("#Type      #ConsumerGroup")]
    assert len(consumer_headers) == 2
    subs = [line.split() for line in lines if line.startswith("Sub ")]
    assert sorted((s[1], s[-1]) for s in subs) == [
        ("CG_trace_ok", "success"),
        ("CG_trace_retry", "failed"),
        ("CG_trace_retry", "success"),
    ]
    # The trace messages are keyed by the traced message's keys as well.
    keyed = broker.admin_json("queryMsgByKey", "-t", TRACE_TOPIC, "-k", "order-2")
    assert keyed and all(m["topic"] == TRACE_TOPIC for m in keyed)


async def test_traces_older_java_clients_wrote_are_read(broker):
    """A 4.x Java client's Pub (13 fields: no offset msg id) and a SubAfter without time or
    group, written to the trace topic as that client does (keyed by the message id)."""
    msg_id = "0A0000010B6418B4AAC2001122330000"
    body = (
        f"Pub\x011700000000000\x01DefaultRegion\x01PG_java\x01{TOPIC}\x01{msg_id}\x01TagA\x01k1\x01"
        "10.0.0.9:10911\x0112\x017\x010\x01true\x02"
        f"SubBefore\x011700000000100\x01DefaultRegion\x01CG_java\x01req-1\x01{msg_id}\x010\x01k1\x02"
        f"SubAfter\x01req-1\x01{msg_id}\x015\x01false\x01k1\x02"
    )
    async with Producer("PG_java_like", broker.namesrv) as producer:
        await producer.send(Message(TRACE_TOPIC, body.encode(), keys=[msg_id, "k1"]))
    rows = await trace_rows(broker, msg_id, 3)
    assert [(r["#Type"], r["#Group"], r["#Status"]) for r in rows] == [
        ("Pub", "PG_java", "success"),
        ("SubBefore", "CG_java", "success"),
        ("SubAfter", "CG_java", "failed"),
    ]
    assert rows[2]["#Time"] == 1700000000105, "time from the SubBefore of the same request"
    assert rows[0]["#CostTimes"] == 7 and rows[0]["storeHost"] == "10.0.0.9:10911"


async def test_a_custom_trace_topic_and_a_lite_pull_consumer(broker):
    custom = "MyTraceTopic"
    broker.admin("updateTopic", "-b", broker.broker, "-t", custom, "-r", "1", "-w", "1")
    async with Producer("PG_custom", broker.namesrv, trace=True, trace_topic=custom) as producer:
        result = await producer.send(Message("CustomTraced", b"one"))
    async with LitePullConsumer(
        "CG_lite", broker.namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        trace=True, trace_topic=custom,
    ) as consumer:  # fmt: skip
        consumer.subscribe("CustomTraced")
        with trio.fail_after(30):
            while not await consumer.poll(1):
                pass
    rows = await trace_rows(broker, result.msg_id, 3, "-t", custom)
    assert [(r["#Type"], r["#Group"]) for r in rows] == [
        ("Pub", "PG_custom"),
        ("SubBefore", "CG_lite"),
        ("SubAfter", "CG_lite"),
    ]
    nothing = await trio.to_thread.run_sync(broker.admin_json, "queryMsgTraceById", "-i", result.msg_id)
    assert nothing == [], "the default trace topic has none of them"


async def test_tracing_never_fails_or_blocks_a_send(broker):
    """Traces to a topic no broker has (and auto-creation off for it: a system name) are
    dropped and counted; every send still succeeds."""
    async with Producer(
        "PG_untraceable", broker.namesrv, trace=True, trace_topic="rmq_sys_nowhere"
    ) as producer:
        for i in range(20):
            assert (await producer.send(Message(TOPIC, f"u{i}".encode()))).status.name == "SEND_OK"
        tracer = producer._tracer
        assert tracer is not None
    assert tracer.written == 0 and tracer.dropped == 20


async def test_the_dispatcher_drops_beyond_its_queue_and_splits_large_batches():
    bodies: list[bytes] = []

    async def slow_send(message: Message) -> None:
        await trio.sleep(0.01)
        bodies.append(message.body)

    dispatcher = TraceDispatcher(slow_send, TRACE_TOPIC)
    record = (
        record_text(TraceRecord(TraceType.PUB, "ID", 1, "r", "g", "t", keys="k" * 900)),
        "ID",
        "k" * 900,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatcher.run)
        dispatcher.append([record] * 3000)
        await dispatcher.close(10)
    assert dispatcher.dropped == 3000 - 2048 and dispatcher.written == 2048
    assert len(bodies) > 1 and all(len(b) <= 128 * 1024 for b in bodies)
    assert sum(b.count(b"\x02") for b in bodies) == 2048


def test_trace_messages_keep_their_keys_within_a_properties_field():
    """Records with long keys split into more messages: a message's properties must fit a
    short (32767), and the broker refuses larger ones."""
    entries = [(f"Pub\x01{i}\x02", f"ID{i:030d}", f"order-key-{i:040d}") for i in range(2000)]
    messages = split_messages(entries)
    assert len(messages) > 1 and sum(count for _, _, count in messages) == 2000
    assert all(len(" ".join(keys)) <= 32767 - 10000 for _, keys, _ in messages)
    assert "".join(body for body, _, _ in messages) == "".join(e[0] for e in entries)


async def test_trocket_produce_and_consume_with_trace(broker):
    """The quickstart: ``trocket produce --trace``, ``trocket consume --trace``, then
    ``queryMsgTraceById`` on the id ``produce --json`` printed."""
    sent = await trio.to_thread.run_sync(
        cli, "produce", "-n", broker.namesrv, "-t", "CliTraced", "-b", "hello", "--trace", "--json"
    )
    msg_id = json.loads(sent)["msgId"]
    await trio.to_thread.run_sync(
        cli, "consume", "-n", broker.namesrv, "-g", "CG_cli_traced", "-t", "CliTraced", "--from", "first",
        "-c", "1", "--trace",
    )  # fmt: skip
    rows = await trace_rows(broker, msg_id, 3)
    assert [(r["#Type"], r["#Group"]) for r in rows] == [
        ("Pub", "TROCKET_CLI_PRODUCER"),
        ("SubBefore", "CG_cli_traced"),
        ("SubAfter", "CG_cli_traced"),
    ]


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trocket", *args], capture_output=True, text=True, timeout=60,
        env=subprocess_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
