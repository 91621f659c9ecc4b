"""The SDK's SimpleConsumer (RocketMQ 5's receive / ack / change invisible duration) over
remoting POP, and ``trocket consume --pop``, against real brokers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

from tests.interop.conftest import start_broker, subprocess_env
from trocket import ClientError, Message, Producer, SimpleConsumer


async def receive_all(consumer: SimpleConsumer, count: int, invisible: float = 30.0):
    got = []
    with trio.fail_after(20):
        while len(got) < count:
            got += await consumer.receive(16, invisible)
    return got


async def test_receive_ack_and_redelivery_after_the_invisible_duration(cluster_factory):
    async with cluster_factory(plugins=["pop", "retry_dlq"], pop={"revive_interval": "50ms"}) as cluster:
        async with Producer("PG", cluster.namesrv_addr) as producer:
            for i in range(5):
                await producer.send(Message("Jobs", f"job-{i}".encode(), tags="a", keys=[f"k{i}"]))
        async with SimpleConsumer(
            "CG_jobs", cluster.namesrv_addr, {"Jobs": "*"}, await_duration=1
        ) as consumer:
            first = await receive_all(consumer, 5, invisible=0.5)
            assert sorted(m.body for m in first) == [f"job-{i}".encode() for i in range(5)]
            assert {m.delivery_attempt for m in first} == {1} and first[0].tag == "a"
            for message in first[1:]:
                await consumer.ack(message)
            (again,) = await receive_all(consumer, 1)
            assert again.body == first[0].body and again.delivery_attempt == 2
            assert again.message_id == first[0].message_id
            with pytest.raises(ClientError, match="code 208"):
                await consumer.ack(first[0])  # its invisible time passed: a dead handle
            extended = await consumer.change_invisible_duration(again, 60)
            with pytest.raises(ClientError, match="code 208"):
                await consumer.ack(again)
            await consumer.ack(extended)
            assert await consumer.receive(16, 1) == []


async def test_receive_rejects_bad_arguments(cluster_factory):
    async with cluster_factory(plugins=["pop"]) as cluster:
        async with Producer("PG", cluster.namesrv_addr) as producer:
            await producer.send(Message("Jobs", b"x"))
        async with SimpleConsumer("CG_jobs", cluster.namesrv_addr, {"Jobs": "*"}) as consumer:
            with pytest.raises(ClientError, match="max_messages"):
                await consumer.receive(100)
            with pytest.raises(ClientError, match="invisible_duration"):
                await consumer.receive(1, 0)
        with pytest.raises(ClientError, match="does not exist"):
            async with SimpleConsumer("CG_jobs", cluster.namesrv_addr, {"NoSuchTopic": "*"}):
                pass


def test_trocket_consume_pop_prints_and_acks(tmp_path):
    broker = start_broker(tmp_path)
    try:
        trocket = [sys.executable, "-m", "trocket"]
        produce = subprocess.run(
            [*trocket, "produce", "-n", broker.namesrv, "-t", "Shell", "-c", "3", "-b", "hi"],
            capture_output=True, text=True, timeout=60, env=subprocess_env(),
        )  # fmt: skip
        assert produce.returncode == 0, produce.stderr
        consume = [*trocket, "consume", "-n", broker.namesrv, "-g", "CG_shell"]
        first = subprocess.run(
            [*consume, "-t", "Shell", "--pop", "-c", "3", "--json"],
            capture_output=True, text=True, timeout=60, env=subprocess_env(),
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        assert len(first.stdout.splitlines()) == 3 and '"deliveryAttempt": 1' in first.stdout
        assert "consumed 3 message(s) by POP" in first.stderr
        figures = broker.figures()
        assert figures["popAcks"] == "3" and figures["popMessagesInFlight"] == "0"
    finally:
        broker.stop()
