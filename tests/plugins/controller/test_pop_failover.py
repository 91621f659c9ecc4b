"""POP across an automatic failover: the promoted replica rebuilds the in-flight state from the
replicated revive log, delivers again what was in flight, and nothing acknowledged."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.plugins.controller.replicas import BROKER_NAME, replica_cluster
from tests.plugins.pop.wire import Popped, ack_request, pop_request, popped
from trocket import Message, Producer
from wire.remoting import RemotingClient, ResponseCode

GROUP = "CG_failover"


async def pop_from(client: RemotingClient, address: str, count: int, invisible_ms: int) -> list[Popped]:
    got: list[Popped] = []
    with trio.fail_after(60):
        while len(got) < count:
            try:
                response = await client.invoke(
                    address, pop_request(GROUP, "PopFailover", poll_ms=1000, invisible_ms=invisible_ms), 10
                )
            except Exception:  # noqa: BLE001 - the new master may still be taking over
                await trio.sleep(0.2)
                continue
            if response.code == ResponseCode.NO_PERMISSION:  # not master yet
                await trio.sleep(0.2)
                continue
            got += popped(response, BROKER_NAME)
    return got


async def test_promoted_replica_redelivers_in_flight_messages(tmp_path: Path):
    with replica_cluster(tmp_path) as cluster:
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id, plugins=("pop",))
        first = await cluster.wait_master(in_set=3)
        async with Producer("PG_pop_failover", cluster.ha.namesrv_addr) as producer:
            for i in range(6):
                assert (
                    await producer.send(Message("PopFailover", f"m{i}".encode()))
                ).status.name == "SEND_OK"
        async with RemotingClient.open() as client:
            master = cluster.replicas[first].addr
            taken = await pop_from(client, master, 6, invisible_ms=4000)
            assert sorted(p.body for p in taken) == [f"m{i}".encode() for i in range(6)]
            for item in taken:
                if item.body in (b"m0", b"m1"):
                    assert (await client.invoke(master, ack_request(GROUP, item), 10)).code == 0
            cluster.replicas[first].kill()
            second = await cluster.wait_master(not_id=first)
            again = await pop_from(client, cluster.replicas[second].addr, 4, invisible_ms=60_000)
            assert sorted(p.body for p in again) == [b"m2", b"m3", b"m4", b"m5"]
            assert {p.message.reconsume_times for p in again} == {1}
            late = await client.invoke(
                cluster.replicas[second].addr, pop_request(GROUP, "PopFailover", poll_ms=2000), 10
            )
            assert popped(late, BROKER_NAME) == []
