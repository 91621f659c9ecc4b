"""Puts that arrive together are appended together (``kernel.gathered_puts``), each batch still
checked and answered on its own, its records together and in order; nothing handed over is
lost when its caller gives up; a failed put is every caller's error. On a running broker (the
in-memory store), with both flush policies."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from kernel import Broker, GetStatus, Message, MessageBatch, PutStatus, pull
from kernel.gathered_puts import GatheredPuts
from kernel.model import PutResult
from kernel.testing import make_config
from tests.conftest import MEMORY_STORE
from wire.record import decode_record


async def queue_bodies(broker, topic: str, queue_id: int) -> dict[int, bytes]:
    await broker.wait_dispatched()
    got = await pull.get_messages(broker.store, topic, queue_id, 0)
    assert got.status is GetStatus.FOUND
    return {record.queue_offset: record.body for record in map(decode_record, got.records)}


@pytest.mark.parametrize("flush", ["sync", "async"])
async def test_puts_started_together_are_one_append_and_answered_each(broker_factory, flush):
    async with broker_factory(flush=flush) as broker:
        puts = GatheredPuts(broker.put_group)
        too_large = b"x" * (broker.ctx.broker.max_message_size + 1)
        batches = [
            MessageBatch([Message("T", b"%d-%d" % (n, i)) for i in range(1 + n % 3)]) for n in range(9)
        ]
        batches.insert(4, MessageBatch([Message("T", too_large)]))
        results: dict[int, PutResult] = {}

        async def put(n: int) -> None:
            results[n] = await puts.put(batches[n])

        before = broker._put.statistics().appends
        async with trio.open_nursery() as nursery:
            for n in range(len(batches)):
                nursery.start_soon(put, n)
        assert (puts.puts, puts.groups) == (10, 1)
        assert broker._put.statistics().appends == before + 1  # nine batches, one store append
        assert results[4].status is PutStatus.MESSAGE_ILLEGAL  # refused alone
        stored = await queue_bodies(broker, "T", 0)
        for n, batch in enumerate(batches):
            if n == 4:
                continue
            result = results[n]
            assert result.status is PutStatus.PUT_OK
            offsets = result.append.queue_offsets
            assert offsets == list(range(offsets[0], offsets[0] + len(batch)))  # together, in order
            assert [stored[o] for o in offsets] == [m.body for m in batch.payload]  # its own records


async def test_puts_arriving_during_a_flush_form_the_next_group(broker_factory):
    async with broker_factory(flush="sync") as broker:
        puts = GatheredPuts(broker.put_group)
        results: list[PutResult] = []

        async def put(body: bytes) -> None:
            results.append(await puts.put(MessageBatch([Message("T", body)])))

        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(put, b"first %d" % n)
            await trio.lowlevel.checkpoint()  # the first group is handed over and waits for its flush
            await trio.lowlevel.checkpoint()
            for n in range(3):
                nursery.start_soon(put, b"second %d" % n)
        assert puts.groups == 2 and len(results) == 6
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert sorted((await queue_bodies(broker, "T", 0)).values()) == sorted(
            [b"first %d" % n for n in range(3)] + [b"second %d" % n for n in range(3)]
        )


async def test_callers_that_give_up_leave_their_records_stored(broker_factory):
    """Whichever of them leads the group, a caller cancelled while its put is pending still
    has its records stored (a retry may duplicate them; nothing handed over is dropped)."""
    async with broker_factory() as broker:
        puts = GatheredPuts(broker.put_group)

        async def put(body: bytes, cancelled: bool) -> None:
            with trio.CancelScope() as scope:
                if cancelled:
                    scope.cancel()
                await puts.put(MessageBatch([Message("T", body)]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(put, b"kept", False)
            for n in range(5):
                nursery.start_soon(put, b"abandoned %d" % n, True)
        assert puts.groups == 1
        bodies = sorted((await queue_bodies(broker, "T", 0)).values())
        assert bodies == [*(b"abandoned %d" % n for n in range(5)), b"kept"]


async def test_a_failed_put_is_every_callers_error(tmp_path):
    """A broker assembled but not running: ``put_group`` raises, and each caller of the group
    gets the error."""
    config = make_config(
        broker={"plugins": [MEMORY_STORE, "flush_async"], "store": "memory", "data_dir": str(tmp_path)}
    )
    puts = GatheredPuts(Broker.assemble(config).put_group)
    errors: list[BaseException] = []

    async def put(n: int) -> None:
        with pytest.raises(RuntimeError, match="not running") as raised:
            await puts.put(MessageBatch([Message("T", b"%d" % n)]))
        errors.append(raised.value)

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(put, n)
    assert len(errors) == 3 and puts.groups == 1
