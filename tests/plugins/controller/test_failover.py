"""Automatic failover with real etcd, controllers and replicas as processes."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.plugins.controller.replicas import replica_cluster
from trocket import Message, Producer


async def test_master_killed_new_master_serves(tmp_path: Path):
    with replica_cluster(tmp_path) as cluster:
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id)
        first = await cluster.wait_master(in_set=3)
        producer = Producer("failover", namesrv_addr=cluster.ha.namesrv_addr)
        async with producer:
            for i in range(20):
                result = await producer.send(Message("Failover", f"before-{i}".encode()))
                assert result.status.name == "SEND_OK"
            cluster.replicas[first].kill()
            second = await cluster.wait_master(not_id=first)
            with trio.fail_after(30):
                while True:
                    try:
                        result = await producer.send(Message("Failover", b"after"))
                        if result.status.name == "SEND_OK":
                            break
                    except Exception:  # noqa: BLE001
                        await trio.sleep(0.2)
        assert second != first
