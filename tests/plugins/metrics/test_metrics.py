"""The metrics plugin over real TCP: after a known workload (sends, pulls, dead letters) the
scraped Prometheus text, parsed with ``prometheus_client.parser``, holds exactly those counts,
and the storage gauges match what the broker reports."""

from __future__ import annotations

import urllib.request

import trio
from prometheus_client.parser import text_string_to_metric_families

from kernel import Broker, MessageBatch, hookimpl
from kernel import Message as StoredInput
from kernel.testing import make_config
from plugins.metrics import EXPORTER
from plugins.metrics.meters import BrokerMeters
from tests.network.conftest import free_port
from tests.network.wire import pull_request
from tests.plugins.pop.wire import ack_request, pop_request, popped
from trocket import Message, Producer
from trocket.admin import AdminClient
from wire import record
from wire.dispatch_batch import as_batch
from wire.remoting import RemotingCommand, RequestCode

GROUP = "CG_metered"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(dict(have).items())
    )


async def test_scraped_counts_match_a_known_workload(cluster_factory):
    async with cluster_factory(
        plugins=["retry_dlq", "metrics"], metrics={"prom_exporter_port": 0}
    ) as cluster:
        exporter = cluster.broker.ctx.stash[EXPORTER]
        assert exporter.url.startswith("http://127.0.0.1:")
        async with Producer("PG", cluster.namesrv_addr) as producer:
            queue = (await producer.fetch_publish_message_queues("Metered"))[0]
            for _ in range(3):
                batch = [Message("Metered", b"m" * (100 + 1000 * j)) for j in range(10)]
                await producer.send_batch(batch, queue=queue)
            for _ in range(5):
                await producer.send(Message("Other", b"x" * 5000))
        await cluster.broker.wait_dispatched()

        pulled: list[record.StoredMessage] = []
        pulled_bytes = 0
        for offset in (0, 16):  # two pulls of 16 and 14
            answer = await cluster.call_raw(
                pull_request("Metered", queue.queue_id, offset, group=GROUP, max_msgs=16)
            )
            assert answer.code == 0, answer.remark
            pulled += record.decode_records(answer.body)
            pulled_bytes += len(answer.body)
        assert len(pulled) == 30
        for message in pulled[:2]:  # the consumer gives up on two at once: straight to the DLQ
            back = await cluster.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"group": GROUP, "offset": message.physical_offset, "delayLevel": -1, "originMsgId": "O"},
            )
            assert back.code == 0, back.remark
        await cluster.broker.wait_dispatched()
        commit = RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": "Metered", "queueId": queue.queue_id, "commitOffset": 10},
        )
        assert (await cluster.call_raw(commit)).code == 0
        async with AdminClient.open([cluster.namesrv_addr]) as admin:
            progress = [row for row in await admin.consumer_progress(GROUP) if row["topic"] == "Metered"]

        samples = await trio.to_thread.run_sync(scrape, exporter.url)
        node = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
        assert value(samples, "rocketmq_messages_in_total", topic="Metered", **node) == 30
        assert value(samples, "rocketmq_messages_in_total", topic="Other") == 5
        assert value(samples, "rocketmq_messages_in_total", topic=f"%DLQ%{GROUP}") == 2
        stored_metered = sum(m.size for m in pulled)
        assert value(samples, "rocketmq_throughput_in_total", topic="Metered") == stored_metered
        assert value(samples, "rocketmq_messages_out_total", topic="Metered", consumer_group=GROUP) == 30
        assert value(samples, "rocketmq_throughput_out_total", topic="Metered") == pulled_bytes
        assert value(samples, "rocketmq_send_to_dlq_messages_total", consumer_group=GROUP) == 2
        assert value(samples, "rocketmq_message_size_count", topic="Metered") == 30
        assert value(samples, "rocketmq_message_size_sum", topic="Metered") == stored_metered
        small = value(samples, "rocketmq_message_size_bucket", topic="Metered", le="1024.0")
        assert small == 3  # the 100-byte bodies, one per batch
        assert value(samples, "rocketmq_message_size_bucket", topic="Metered", le="+Inf") == 30

        lag = value(samples, "rocketmq_consumer_lag_messages", topic="Metered", consumer_group=GROUP)
        assert lag == sum(row["diff"] for row in progress) == 20  # as consumerProgress shows it
        assert value(samples, "rocketmq_consumer_lag_latency", topic="Metered", consumer_group=GROUP) > 0

        marks = cluster.broker.store.watermarks()
        assert value(samples, "rocketmq_storage_size") == marks.wrote - marks.min_offset
        assert value(samples, "rocketmq_storage_dispatch_behind_bytes") == 0
        assert value(samples, "trocket_recovery_clean_shutdown") == 1
    assert exporter.url  # the endpoint is closed with the broker
    url = exporter.url
    try:
        await trio.to_thread.run_sync(scrape, url)
    except OSError:
        pass
    else:
        raise AssertionError("the endpoint still answers after the broker stopped")


class PullRecorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, int]] = []

    @hookimpl
    def trocket_messages_pulled(self, topic, group, count, size):
        self.calls.append((topic, group, count, size))


async def test_hook_trocket_messages_pulled(cluster_factory):
    recorder = PullRecorder()
    async with cluster_factory(plugin_objects=[("recorder", recorder)]) as cluster:
        async with Producer("PG", cluster.namesrv_addr) as producer:
            queue = (await producer.fetch_publish_message_queues("Pulled"))[0]
            await producer.send_batch([Message("Pulled", b"a"), Message("Pulled", b"bb")], queue=queue)
        await cluster.broker.wait_dispatched()
        empty = await cluster.call_raw(pull_request("Pulled", queue.queue_id, 2, group="CG"))
        assert not empty.body and recorder.calls == []  # an empty answer is not reported
        answer = await cluster.call_raw(pull_request("Pulled", queue.queue_id, 0, group="CG"))
        assert recorder.calls == [("Pulled", "CG", 2, len(answer.body))]


class Batches:
    def __init__(self) -> None:
        self.seen: list = []

    @hookimpl
    def trocket_records_dispatched(self, records):
        self.seen.append(records)


async def test_columns_and_records_count_alike_and_skip_what_came_before_this_start(broker_factory):
    """The columnar count of a dispatch batch equals the record-by-record one, and records
    before ``since`` (the log's end at recovery: re-dispatched after a crash) are left out."""
    batches = Batches()
    async with broker_factory(
        plugins=["store_mmap"], store="mmap", plugin_objects=[("b", batches)]
    ) as broker:
        for i in range(12):
            sizes = [50 + 2000 * (i % 3)] * 40 + ([300_000] if i % 4 == 0 else [])
            messages = [StoredInput(f"T{i % 3}", b"x" * size) for size in sizes]
            assert (await broker.put(MessageBatch(messages))).ok
        await broker.wait_dispatched()
    records = [record for batch in batches.seen for record in batch]
    since = records[len(records) // 2].physical_offset
    by_columns, by_records = BrokerMeters("C", "b"), BrokerMeters("C", "b")
    for batch in batches.seen:
        # Puts of message objects reach dispatch as records; their columns count the same.
        by_columns.stored(as_batch(batch), since)
        by_records.stored(list(batch), since)
    assert by_columns.snapshot(None) == by_records.snapshot(None)
    kept = [r for r in records if r.physical_offset >= since]
    counted = by_columns.snapshot(None).stored
    assert sum(row[0] for row in counted.values()) == len(kept) < len(records)
    assert sum(row[1] for row in counted.values()) == sum(r.size for r in kept)


async def test_requests_inflight_and_flush_latency_are_scraped(cluster_factory):
    """``rocketmq_rpc_latency`` counts each request by code, response code and result, for the
    broker's port and the NameServer; in-flight messages are pulled minus committed; a sync
    flush's fsyncs show in ``trocket_flush_latency_seconds``."""
    async with cluster_factory(
        store="mmap",
        plugins=["flush_sync", "metrics"],
        broker={"flush": "sync"},
        metrics={"prom_exporter_port": 0},
    ) as cluster:
        exporter = cluster.broker.ctx.stash[EXPORTER]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            queue = (await producer.fetch_publish_message_queues("Flown"))[0]
            for _ in range(4):
                await producer.send_batch([Message("Flown", b"f%d" % j) for j in range(10)], queue=queue)
        await cluster.broker.wait_dispatched()
        for offset in (0, 25):
            answer = await cluster.call_raw(
                pull_request("Flown", queue.queue_id, offset, group=GROUP, max_msgs=25)
            )
            assert answer.code == 0, answer.remark
        commit = RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": "Flown", "queueId": queue.queue_id, "commitOffset": 12},
        )
        assert (await cluster.call_raw(commit)).code == 0
        unknown = await cluster.call_raw(RemotingCommand.request(9999))
        assert unknown.code == 3  # REQUEST_CODE_NOT_SUPPORTED, counted like any answer
        flushes = cluster.broker.statistics().flush.flushes

        samples = await trio.to_thread.run_sync(scrape, exporter.url)
        broker = {"node_type": "broker", "protocol_type": "remoting", "result": "success"}
        pulls = value(samples, "rocketmq_rpc_latency_count", request_code="11", response_code="0", **broker)
        assert pulls == 2
        commits = value(samples, "rocketmq_rpc_latency_count", request_code="15", **broker)
        assert commits == 1
        assert (
            value(samples, "rocketmq_rpc_latency_count", request_code="-1", response_code="3") == 1
        )  # unknown: one label
        assert value(samples, "rocketmq_rpc_latency_bucket", request_code="11", le="+Inf") == 2
        assert value(samples, "rocketmq_rpc_latency_sum", request_code="11") > 0
        registrations = value(
            samples,
            "rocketmq_rpc_latency_count",
            node_type="nameserver",
            request_code="103",
            response_code="0",
        )
        assert registrations >= 1  # REGISTER_BROKER, served by the NameServer of this process
        routes = value(samples, "rocketmq_rpc_latency_count", node_type="nameserver", request_code="105")
        assert routes >= 1  # the producer's route lookup

        inflight = value(samples, "rocketmq_consumer_inflight_messages", topic="Flown", consumer_group=GROUP)
        assert inflight == 40 - 12  # pulled to 40, committed 12
        flushed = value(samples, "trocket_flush_latency_seconds_count")
        assert flushed >= 4 and flushed <= flushes  # one fsync per waiting send at least, and no more
        assert value(samples, "trocket_flush_latency_seconds_bucket", le="+Inf") == flushed


async def test_a_nameserver_alone_serves_its_request_figures(tmp_path):
    """A process that hosts only a NameServer exports ``rocketmq_rpc_latency`` under
    ``node_type="nameserver"`` and nothing about a store it does not have."""
    port = free_port()
    config = make_config(
        broker={"roles": ["namesrv"], "plugins": ["namesrv", "metrics"], "data_dir": str(tmp_path)},
        namesrv={"listen_port": port},
        metrics={"prom_exporter_port": 0},
    )
    broker = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        exporter = broker.ctx.stash[EXPORTER]
        async with AdminClient.open([f"127.0.0.1:{port}"]) as admin:
            await admin.cluster_info()
        samples = await trio.to_thread.run_sync(scrape, exporter.url)
        broker.request_stop("test over")
        await broker.wait_stopped()
    asked = value(samples, "rocketmq_rpc_latency_count", node_type="nameserver", request_code="106")
    assert asked == 1  # GET_BROKER_CLUSTER_INFO
    assert not any(name.startswith("rocketmq_storage") for name, _ in samples)


async def test_pop_in_flight_and_counters_are_scraped(cluster_factory):
    """A POP group's in-flight messages (popped, not acked) join ``rocketmq_consumer_inflight_messages``;
    pops, acks, revives and dead letters are counted."""
    async with cluster_factory(
        plugins=["metrics", "pop", "retry_dlq"],
        metrics={"prom_exporter_port": 0},
        pop={"revive_interval": "50ms"},
    ) as cluster:
        exporter = cluster.broker.ctx.stash[EXPORTER]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            queue = (await producer.fetch_publish_message_queues("Popped"))[0]
            for i in range(5):
                await producer.send(Message("Popped", b"p%d" % i), queue=queue)
        await cluster.broker.wait_dispatched()
        answer = await cluster.call_raw(pop_request(GROUP, "Popped", queue_id=queue.queue_id))
        items = popped(answer)
        assert len(items) == 5
        for item in items[:2]:
            assert (await cluster.call_raw(ack_request(GROUP, item))).code == 0
        samples = await trio.to_thread.run_sync(scrape, exporter.url)
        inflight = value(samples, "rocketmq_consumer_inflight_messages", topic="Popped", consumer_group=GROUP)
        assert inflight == 3
        assert value(samples, "trocket_pop_popped_total") == 5
        assert value(samples, "trocket_pop_acked_total") == 2
