"""trocket.Producer against a NameServer and broker over TCP: what a RocketMQ user relies on."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

import pytest
import trio

from tests.interop.conftest import subprocess_env
from tests.interop.test_namesrv_expiry import start
from tests.network.conftest import free_port, pulled
from trocket import (
    ClientError,
    ConsumeFromWhere,
    InvalidMessage,
    LitePullConsumer,
    Message,
    Producer,
    SendError,
    SendStatus,
    select_by_hash,
)
from trocket.client.selectors import java_string_hash
from wire import record
from wire.remoting import RequestCode


async def test_send_returns_where_the_message_was_stored(cluster_factory):
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        message = Message("Orders", b"order 42 paid", tags="paid", keys=["order-42", "cust-7"])
        result = await producer.send(message)
        assert result.status is SendStatus.SEND_OK
        assert result.queue.topic == "Orders" and result.queue_offset == 0
        (stored,) = await pulled(cluster, "Orders", result.queue.queue_id)
        assert stored.body == b"order 42 paid" and stored.tags == "paid"
        assert stored.keys == ["order-42", "cust-7"]
        assert stored.unique_key == result.msg_id and len(result.msg_id) == 32
        assert stored.offset_msg_id == result.offset_msg_id
        view = await cluster.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": stored.physical_offset})
        assert record.decode_record(view.body).body == b"order 42 paid"


async def test_busy_polling_broker_and_clients_send_and_consume_as_usual(cluster_factory):
    """``[remoting] busy_poll`` on the broker and ``busy_poll`` on the producer and consumer:
    the same answers and messages; the broker's loop polled while they came and parks after."""
    async with cluster_factory(remoting={"busy_poll": "20ms"}) as cluster:
        async with Producer("PG", cluster.namesrv_addr, busy_poll=0.02) as producer:
            results = [await producer.send(Message("Polled", f"m{i}".encode())) for i in range(20)]
            batch = await producer.send_batch([Message("Polled", f"b{i}".encode()) for i in range(8)])
        assert all(r.status is SendStatus.SEND_OK for r in [*results, batch])
        bodies = {f"m{i}".encode() for i in range(20)} | {f"b{i}".encode() for i in range(8)}
        consumer = LitePullConsumer(
            "CG_polled",
            cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            busy_poll=0.02,
        )
        seen: set[bytes] = set()
        async with consumer:
            consumer.subscribe("Polled")
            with trio.move_on_after(20):
                while not bodies <= seen:
                    seen |= {message.body for message in await consumer.poll(timeout=1.0)}
        assert seen == bodies
        poller = cluster.network.server.busy_poller
        assert poller is not None and poller.spins > 0
        with trio.fail_after(10):  # no traffic now: the broker's loop sleeps again
            while not poller.parked:  # noqa: ASYNC110 - polling a plain attribute
                await trio.sleep(0.05)


async def test_broker_and_clients_poll_adaptively_by_default(cluster_factory):
    """Without any setting the broker and the SDK poll adaptively (``"auto"``): only while
    traffic is dense; a broker taking sends one after another polls after its answers, and
    parks once they stop. (Whether a poll catches the next send depends on the machine's round
    trip against the 200 µs window, with client and broker in one loop here: the bench
    measures that, ``hits`` is not asserted.)"""
    async with cluster_factory() as cluster:
        poller = cluster.network.server.busy_poller
        assert poller is not None and poller.adaptive
        async with Producer("PG", cluster.namesrv_addr) as producer:
            assert producer._remoting is not None and producer._remoting.busy_poller is not None
            assert producer._remoting.busy_poller.adaptive
            for i in range(50):
                assert (await producer.send(Message("Auto", f"m{i}".encode()))).status is SendStatus.SEND_OK
        assert poller.spins > 0
        with trio.fail_after(10):  # idle now: the loop sleeps
            while not poller.parked:  # noqa: ASYNC110 - polling a plain attribute
                await trio.sleep(0.05)
    with pytest.raises(ValueError, match='busy_poll must be "auto", "off" or a duration'):
        async with Producer("PG", "127.0.0.1:9876", busy_poll="sometimes"):
            pass


async def test_round_robin_spreads_sends_over_the_write_queues(cluster_factory):
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        results = [await producer.send(Message("Spread", f"m{i}".encode())) for i in range(16)]
        assert Counter(r.queue.queue_id for r in results) == {0: 4, 1: 4, 2: 4, 3: 4}


async def test_large_bodies_are_compressed_and_come_back_intact(cluster_factory):
    body = b"compressible " * 2000  # 26 KB
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        result = await producer.send(Message("Big", body))
        (stored,) = await pulled(cluster, "Big", result.queue.queue_id)
        assert stored.sys_flag & 1 and len(stored.body) < len(body) // 10
        assert stored.payload == body


async def test_the_4mib_limit_is_enforced_before_sending(cluster_factory):
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        with pytest.raises(InvalidMessage, match="4194305 bytes; the limit is 4194304"):
            await producer.send(Message("Huge", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(InvalidMessage, match="body is empty"):
            await producer.send(Message("Huge", b""))
        result = await producer.send(Message("Huge", os.urandom(1024 * 1024)))  # incompressible 1 MiB
        assert result.status is SendStatus.SEND_OK


async def test_batch_oneway_and_async_sends(cluster_factory):
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        queue = (await producer.send(Message("Mixed", b"first"))).queue
        batch = [Message("Mixed", f"b{i}".encode(), keys=[f"k{i}"]) for i in range(32)]
        result = await producer.send_batch(batch, queue=queue)
        assert result.queue == queue and result.queue_offset == 1 and len(result.msg_id.split(",")) == 32
        await producer.send_oneway(Message("Mixed", b"oneway"), queue=queue)
        seen = []
        pending = producer.send_async(
            Message("Mixed", b"async"), lambda r, e: seen.append((r, e)), queue=queue
        )
        done = await pending.result()
        assert seen == [(done, None)] and done.queue_offset == 34
        bodies = [m.body for m in await pulled(cluster, "Mixed", queue.queue_id)]
        assert bodies == [b"first", *(f"b{i}".encode() for i in range(32)), b"oneway", b"async"]


async def test_ordered_sends_with_a_sharding_key_stay_in_one_queue(cluster_factory):
    # Values printed by Java 17 (jshell): "x".hashCode()
    assert java_string_hash("hello") == 99162322 and java_string_hash("order-€") == -1207102995
    assert java_string_hash("\U0001f600x") == 54959989, "surrogate pairs count as two UTF-16 units"
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        queues = set()
        for step in range(6):
            message = Message("Ordered", f"order-7 step {step}".encode())
            queues.add((await producer.send(message, selector=select_by_hash, arg="order-7")).queue)
        (queue,) = queues
        steps = [m.body for m in await pulled(cluster, "Ordered", queue.queue_id)]
        assert steps == [f"order-7 step {s}".encode() for s in range(6)]


async def test_a_refused_send_says_why(cluster_factory):
    async with cluster_factory() as cluster, Producer("PG", cluster.namesrv_addr) as producer:
        message = Message("Later", b"x", properties={"TIMER_DELAY_MS": "oops"})
        with pytest.raises(SendError) as error:
            await producer.send(message)
        assert error.value.code is not None and "no loaded plugin parks delayed messages" in str(error.value)


async def test_a_send_with_no_reachable_broker_fails_within_its_timeout(tmp_path):
    namesrv_port = free_port()
    async with Producer("PG", f"127.0.0.1:{namesrv_port}", send_timeout=1.0) as producer:
        started = trio.current_time()
        with pytest.raises(ClientError, match="no NameServer answered"):
            await producer.send(Message("Nowhere", b"x"))
        assert trio.current_time() - started < 10


def _broker_config(tmp_path, name: str, namesrv: str) -> object:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f'[broker]\nbroker_name = "{name}"\ndata_dir = "{tmp_path / name}"\n'
        f'listen_port = {free_port()}\nnamesrv_addr = ["{namesrv}"]\n'
        '[store_mmap]\ncommit_log_file_size = "16MiB"\n'
    )
    return config


async def test_sends_go_to_the_second_broker_when_the_first_is_down(tmp_path):
    namesrv_port = free_port()
    namesrv = f"127.0.0.1:{namesrv_port}"
    ns_config = tmp_path / "namesrv.toml"
    ns_config.write_text(
        f'[broker]\nroles = ["namesrv"]\ndata_dir = "{tmp_path / "ns"}"\n'
        f"[namesrv]\nlisten_port = {namesrv_port}\n"
    )
    processes = [start("namesrv", ns_config, tmp_path / "ns.log")]
    try:
        for name in ("broker-a", "broker-b"):
            processes.append(
                start("broker", _broker_config(tmp_path, name, namesrv), tmp_path / f"{name}.log")
            )
        await trio.run_process(
            [sys.executable, "-m", "trocket", "admin", "updateTopic", "-n", namesrv, "-c", "DefaultCluster",
             "-t", "Failover", "-w", "2", "-r", "2"],
            capture_stdout=True, capture_stderr=True, env=subprocess_env(),
        )  # fmt: skip
        async with Producer("PG", namesrv, send_timeout=10) as producer:
            before = [await producer.send(Message("Failover", f"before {i}".encode())) for i in range(8)]
            assert {r.queue.broker_name for r in before} == {"broker-a", "broker-b"}
            processes[1].send_signal(signal.SIGKILL)  # broker-a: still in the route for a while
            processes[1].wait(timeout=30)
            after = [await producer.send(Message("Failover", f"after {i}".encode())) for i in range(8)]
        assert all(r.status is SendStatus.SEND_OK and r.queue.broker_name == "broker-b" for r in after)
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)


async def test_oneway_sends_right_before_shutdown_are_written_not_dropped(cluster_factory):
    """Shutdown writes what oneway sends queued before it closes the connections (a
    transaction's END_TRANSACTION is oneway too)."""
    async with cluster_factory() as cluster:
        async with Producer("PG", cluster.namesrv_addr) as producer:
            queue = (await producer.fetch_publish_message_queues("Oneway"))[0]
            for i in range(2000):
                await producer.send_oneway(Message("Oneway", f"m{i}".encode() * 50), queue=queue)
        await trio.sleep(1)
        assert len(await pulled(cluster, "Oneway", queue.queue_id)) == 2000
