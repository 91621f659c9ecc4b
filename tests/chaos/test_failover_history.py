"""The history checker on a real failover without network namespaces: three replicas in
controller mode on loopback, eight producers of ``trocket.chaos.workload`` (raw SEND_MESSAGE_V2
frames, so every answer names the replica that gave it), the master SIGKILLed mid-run, then a
final drain of the new master; the checker must find nothing unsafe."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from tests.plugins.controller.replicas import replica_cluster
from trocket.chaos import HistoryWriter, check, read_history
from trocket.chaos.workload import Workload, create_topic, drain, produce

PRODUCERS = 8


async def test_a_killed_master_loses_nothing_acknowledged_by_the_history(tmp_path: Path):
    path = tmp_path / "history.jsonl"
    with replica_cluster(tmp_path) as cluster, path.open("wb") as out:
        history = HistoryWriter(out, clock=trio.current_time)
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id)
        first = await cluster.wait_master(in_set=3)
        workload = Workload(cluster.ha.namesrv_addr)
        await create_topic([cluster.replicas[first].addr], workload)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for process in range(PRODUCERS):
                nursery.start_soon(produce, f"p{process}", workload, history, stop)
            await trio.sleep(3)
            history.event("fault", name=f"SIGKILL replica {first} (the master)", phase="start")
            cluster.replicas[first].process.send_signal(signal.SIGKILL)
            second = await cluster.wait_master(not_id=first)
            history.event("fault", name=f"SIGKILL replica {first} (the master)", phase="stop")
            await trio.sleep(3)
            stop.set()
        await drain(cluster.replicas[second].addr, workload, history)
    report = check(read_history(path))
    print(report.summary())
    assert report.acked > 50, report.summary()
    assert report.safe, report.summary()
    assert report.lost == () and report.inconsistent == () and report.split_brain == ()
    assert report.rto_after_fault  # service came back after the kill
