"""gRPC sends to the broker beside the proxy that arrive together are put together
(``kernel.gathered_puts``, whose own tests are in tests/kernel/test_gathered_puts.py), and each
answer names its own message."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import trio

from plugins.proxy import PROXY
from tests.network.conftest import pulled
from tests.plugins.proxy.conftest import SERVICE
from tests.plugins.proxy.test_bad_calls import create_topic, message
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb


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
