"""Sends to the broker beside the proxy that arrive together are appended together
(``plugins.proxy.local_puts``), each still checked and answered on its own, and none lost when
a caller gives up."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import trio

from kernel.model import Message, MessageBatch, PutStatus
from plugins.proxy import PROXY
from plugins.proxy.local_puts import LocalPuts
from tests.network.conftest import pulled
from tests.plugins.proxy.conftest import SERVICE
from tests.plugins.proxy.test_bad_calls import create_topic, message
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb


def appends(cluster) -> int:
    return cluster.broker._put.statistics().appends


async def test_puts_started_together_are_one_append_and_answered_each(proxy_cluster):
    async with proxy_cluster() as (cluster, _):
        await create_topic(cluster, "Together")
        puts = LocalPuts(cluster.broker.put_group)
        too_large = b"x" * (cluster.broker.ctx.broker.max_message_size + 1)
        bodies = [f"m{n}".encode() for n in range(9)]
        bodies.insert(4, too_large)
        results: dict[int, object] = {}

        async def put(n: int) -> None:
            results[n] = await puts.put(MessageBatch([Message("Together", bodies[n], 1)]))

        before = appends(cluster)
        async with trio.open_nursery() as nursery:
            for n in range(len(bodies)):
                nursery.start_soon(put, n)
        assert (puts.puts, puts.groups) == (10, 1)
        assert appends(cluster) == before + 1  # nine messages, one store append
        assert results[4].status is PutStatus.MESSAGE_ILLEGAL  # refused alone
        stored = [results[n] for n in range(10) if n != 4]
        assert all(r.status is PutStatus.PUT_OK for r in stored)
        by_offset = {r.append.queue_offsets[0]: r.append.msg_ids[0] for r in stored}
        assert len(by_offset) == 9
        queue = {m.queue_offset: m for m in await pulled(cluster, "Together", 1)}
        for n in (n for n in range(10) if n != 4):
            found = queue[results[n].append.queue_offsets[0]]
            assert found.body == bodies[n]  # each caller's answer names its own message


async def test_callers_that_give_up_leave_their_messages_stored(proxy_cluster):
    """Whichever of them leads the group, a caller cancelled while its put is pending still
    has its message stored (a retry may duplicate it; nothing handed over is dropped)."""
    async with proxy_cluster() as (cluster, _):
        await create_topic(cluster, "GivenUp")
        puts = LocalPuts(cluster.broker.put_group)

        async def put(body: bytes, cancelled: bool) -> None:
            with trio.CancelScope() as scope:
                if cancelled:
                    scope.cancel()
                await puts.put(MessageBatch([Message("GivenUp", body, 0)]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(put, b"kept", False)
            for n in range(5):
                nursery.start_soon(put, f"abandoned {n}".encode(), True)
        assert puts.groups == 1
        bodies = sorted(m.body for m in await pulled(cluster, "GivenUp", 0))
        assert bodies == [*(f"abandoned {n}".encode() for n in range(5)), b"kept"]


def send_concurrently(address: str, topic: str, count: int, in_flight: int) -> list[spb.SendMessageResponse]:
    """``count`` SendMessage calls, ``in_flight`` at a time on one channel, as a busy client."""

    async def run() -> list[spb.SendMessageResponse]:
        meta = [("x-mq-client-id", f"test@{uuid.uuid4().hex[:8]}"), ("x-mq-protocol", "GRPC_V2")]
        async with grpc.aio.insecure_channel(address) as channel:
            send = channel.unary_unary(
                SERVICE + "SendMessage",
                request_serializer=spb.SendMessageRequest.SerializeToString,
                response_deserializer=spb.SendMessageResponse.FromString,
            )
            limit = asyncio.Semaphore(in_flight)

            async def one(n: int) -> spb.SendMessageResponse:
                async with limit:
                    request = spb.SendMessageRequest(messages=[message(topic, f"b{n}".encode(), f"ID{n}")])
                    return await send(request, metadata=meta, timeout=30)

            return await asyncio.gather(*(one(n) for n in range(count)))

    return asyncio.run(run())


async def test_concurrent_grpc_sends_are_grouped_and_each_answered(proxy_cluster):
    async with proxy_cluster() as (cluster, caller):
        await create_topic(cluster, "Busy")
        service = cluster.broker.ctx.stash[PROXY]
        answers = await trio.to_thread.run_sync(send_concurrently, caller.address, "Busy", 200, 32)
        assert all(a.status.code == pb.OK for a in answers)
        figures = service.figures()
        assert int(figures["proxyLocalPuts"]) == 200
        assert int(figures["proxyLocalPutGroups"]) < 200  # some arrived together
        stored: dict[tuple[int, int], bytes] = {}
        for queue_id in range(4):
            for m in await pulled(cluster, "Busy", queue_id):
                stored[(queue_id, m.queue_offset)] = m.body
        assert sorted(stored.values()) == sorted(f"b{n}".encode() for n in range(200))
        for n, answer in enumerate(answers):  # each answer's offset is its own message's
            (entry,) = answer.entries
            assert entry.message_id == f"ID{n}"
            at_offset = {body for (_, offset), body in stored.items() if offset == entry.offset}
            assert f"b{n}".encode() in at_offset
