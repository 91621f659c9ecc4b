"""Many producers with one send in flight each, against a broker whose read reactor answers
their lone sends together (``wire.remoting.read_reactor``): every send stored once, where its
answer says, with either flush policy; and the same with the reactor off."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from tests.network.conftest import pulled
from trocket import Message, Producer
from wire.remoting import RequestCode
from wire.remoting import crowd as crowd_module

PRODUCERS = 24
SENDS = 15
TOPIC = "Together"


@pytest.fixture(autouse=True)
def crowded_for_a_minute(monkeypatch):
    """The producers' receives count as crowded whatever the pace of a loaded machine."""
    monkeypatch.setattr(crowd_module, "CROWD_HOLD", 60.0)


async def send_from_many(cluster: Any) -> dict[bytes, tuple[int, int]]:
    """Every producer's sends, one in flight each, all producers at once: body -> where stored."""
    stored: dict[bytes, tuple[int, int]] = {}

    async def produce(index: int) -> None:
        async with Producer(f"PG{index}", cluster.namesrv_addr, send_timeout=10) as producer:
            for number in range(SENDS):
                body = f"p{index}-m{number}".encode()
                result = await producer.send(Message(TOPIC, body))
                stored[body] = (result.queue.queue_id, result.queue_offset)

    async with trio.open_nursery() as nursery:
        for index in range(PRODUCERS):
            nursery.start_soon(produce, index)
    return stored


async def figures(cluster: Any) -> dict[str, str]:
    return json.loads((await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]


async def assert_stored_where_answered(cluster: Any, stored: dict[bytes, tuple[int, int]]) -> None:
    assert len(stored) == PRODUCERS * SENDS
    found: dict[bytes, tuple[int, int]] = {}
    for queue_id in range(4):
        for message in await pulled(cluster, TOPIC, queue_id):
            assert message.body not in found, f"{message.body!r} stored twice"
            found[message.body] = (queue_id, message.queue_offset)
    assert found == stored


@pytest.mark.parametrize("flush", ["async", "sync"])
async def test_sends_of_many_producers_are_stored_where_their_answers_say(cluster_factory, flush):
    plugins = ["flush_sync"] if flush == "sync" else []
    async with cluster_factory(store="mmap", plugins=plugins, broker={"flush": flush}) as cluster:
        stored = await send_from_many(cluster)
        await assert_stored_where_answered(cluster, stored)
        table = await figures(cluster)
        assert int(table["sendsReadTogetherTotal"]) > 0, "the reactor answered some of them"
        assert int(table["putMessageTimesTotal"]) == PRODUCERS * SENDS


async def test_with_the_reactor_off_each_connection_reads_its_own_sends(cluster_factory):
    async with cluster_factory(store="mmap", remoting={"read_reactor": False}) as cluster:
        stored = await send_from_many(cluster)
        await assert_stored_where_answered(cluster, stored)
        assert (await figures(cluster))["sendsReadTogetherTotal"] == "0"
        assert cluster.network.server is not None and cluster.network.server.reactor is None
