"""The put and pull pipelines on the in-memory reference store, with both flush policies."""

from __future__ import annotations

import pytest
import trio

from kernel import GetStatus, Message, MessageBatch, PutStatus, pull
from kernel.model import tags_code
from wire.record import decode_record


def batch(topic: str = "T", n: int = 1, **properties: str) -> MessageBatch:
    return MessageBatch([Message(topic, f"m{i}".encode(), properties=dict(properties)) for i in range(n)])


@pytest.mark.parametrize("flush", ["sync", "async"])
async def test_put_then_pull_round_trip(broker_factory, flush):
    async with broker_factory(flush=flush) as broker:
        result = await broker.put(batch(n=3, TAGS="A", KEYS="k1 k2"))
        assert result.status is PutStatus.PUT_OK
        assert result.append.queue_offsets == [0, 1, 2]
        await broker.wait_dispatched()
        got = await pull.get_messages(broker.store, "T", 0, 0)
        assert got.status is GetStatus.FOUND
        decoded = [decode_record(r) for r in got.records]
        assert [m.body for m in decoded] == [b"m0", b"m1", b"m2"]
        assert decoded[0].keys == ["k1", "k2"] and decoded[0].tags == "A"
        assert got.next_begin_offset == 3
        if flush == "sync":
            assert broker.store.positions.flushed.value >= result.append.end_offset


async def test_sync_flush_acknowledges_only_after_the_flush(broker_factory):
    async with broker_factory(flush="sync") as broker:
        broker.store.flush_delay = 0.05
        flushed_before = broker.store.positions.flushed.value
        result = await broker.put(batch())
        assert result.ok
        assert broker.store.positions.flushed.value >= result.append.end_offset > flushed_before


async def test_group_commit_releases_many_puts_with_few_flushes(broker_factory):
    async with broker_factory(flush="sync") as broker:
        broker.store.flush_delay = 0.02
        results = []

        async def producer(i: int) -> None:
            results.append(await broker.put(batch(n=1)))

        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(producer, i)
        assert all(r.ok for r in results) and len(results) == 64
        flushes = broker.statistics().flush.flushes
        assert flushes < 16, f"64 concurrent puts took {flushes} flushes; group commit is not grouping"


async def test_sync_flush_timeout_gives_flush_disk_timeout(broker_factory, autojump_clock):
    async with broker_factory(flush="sync", flush_sync={"timeout": "1s"}) as broker:
        broker.store.flush_delay = 30
        result = await broker.put(batch())
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert result.append is not None, "the message is stored, only not durable in time"
        assert broker.statistics().flush.timeouts == 1


async def test_wait_false_skips_the_flush_wait(broker_factory, autojump_clock):
    async with broker_factory(flush="sync", flush_sync={"timeout": "1s"}) as broker:
        broker.store.flush_delay = 30
        start = trio.current_time()
        result = await broker.put(batch(WAIT="false"))
        assert result.status is PutStatus.PUT_OK
        assert trio.current_time() - start < 1


async def test_flush_failure_never_acknowledges_and_turns_the_store_read_only(broker_factory):
    async with broker_factory(flush="sync") as broker:
        broker.store.fail_next_flush = True
        failed = await broker.put(batch())
        assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert "flush failed" in failed.remark
        refused = await broker.put(batch())
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "read-only" in refused.remark
        await broker.wait_dispatched()
        assert (await pull.get_messages(broker.store, "T", 0, 0)).status is GetStatus.FOUND, "reads continue"


async def test_async_flush_acknowledges_from_the_page_cache(broker_factory, autojump_clock):
    async with broker_factory(flush="async", flush_async={"interval": "500ms", "least_pages": 0}) as broker:
        result = await broker.put(batch())
        assert result.ok
        assert broker.store.positions.flushed.value < result.append.end_offset
        await trio.sleep(0.6)
        assert broker.store.positions.flushed.value >= result.append.end_offset


async def test_async_flush_least_pages_and_thorough_interval(broker_factory, autojump_clock):
    config = {"interval": "100ms", "least_pages": 4, "thorough_interval": "2s"}
    async with broker_factory(flush="async", flush_async=config) as broker:
        small = await broker.put(batch())
        await trio.sleep(1)
        assert broker.store.positions.flushed.value < small.append.end_offset, "under 4 dirty pages"
        big = await broker.put(MessageBatch([Message("T", b"x" * 20000)]))
        await trio.sleep(0.2)
        assert broker.store.positions.flushed.value >= big.append.end_offset
        tail = await broker.put(batch())
        await trio.sleep(2.2)
        assert broker.store.positions.flushed.value >= tail.append.end_offset, "thorough flush"


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (Message("T", b"x" * (4 * 1024 * 1024 + 1)), PutStatus.MESSAGE_ILLEGAL),
        (Message("", b"x"), PutStatus.MESSAGE_ILLEGAL),
        (Message("t" * 128, b"x"), PutStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", properties={"K": "nul\x00inside"}), PutStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", properties={"big": "v" * 33000}), PutStatus.PROPERTIES_SIZE_EXCEEDED),
    ],
)
async def test_limits_are_enforced_before_append(broker_factory, message, status):
    async with broker_factory() as broker:
        result = await broker.put(MessageBatch([message]))
        assert result.status is status and result.append is None
        assert broker.store.positions.wrote.value == 0


async def test_pull_filters_by_tag_hash(broker_factory):
    async with broker_factory() as broker:
        for tag in ("A", "B", "A", "C"):
            await broker.put(batch(TAGS=tag))
        await broker.wait_dispatched()
        got = await pull.get_messages(broker.store, "T", 0, 0, tags_codes=[tags_code("A"), tags_code("C")])
        assert [decode_record(r).tags for r in got.records] == ["A", "A", "C"]
        assert got.queue_offsets == [0, 2, 3]


async def test_visible_after_flush_hides_unflushed_messages(broker_factory, autojump_clock):
    async with broker_factory(
        flush="async", broker={"visible_after_flush": True}, flush_async={"interval": "1s", "least_pages": 0}
    ) as broker:
        await broker.put(batch())
        await trio.sleep(0.1)
        assert (await pull.get_messages(broker.store, "T", 0, 0)).status is GetStatus.NO_MESSAGE_IN_QUEUE
        await trio.sleep(1.5)
        assert (await pull.get_messages(broker.store, "T", 0, 0)).status is GetStatus.FOUND


@pytest.mark.parametrize(
    "properties",
    [{"DELAY": "3"}, {"TIMER_DELIVER_MS": "1893456000000"}, {"TIMER_DELAY_MS": "5000"}],
    ids=["delay-level", "deliver-at", "delay-ms"],
)
async def test_delayed_messages_are_refused_without_a_delay_plugin(broker_factory, properties):
    """Without retry_dlq nothing would hold the message back: refusing beats ignoring the delay."""
    async with broker_factory() as broker:
        result = await broker.put(MessageBatch([Message("T", b"later", properties=properties)]))
        assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "delayed delivery is not enabled" in result.remark and "trocket plugins" in result.remark
        plain = await broker.put(MessageBatch([Message("T", b"now", properties={"DELAY": "0"})]))
        assert plain.status is PutStatus.PUT_OK
