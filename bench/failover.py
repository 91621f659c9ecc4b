"""Automatic failover in controller mode, measured in one run (issue 17).

A real etcd, one controller, a NameServer and three replicas (SYNC_MASTER, controller mode)
run as separate processes on loopback with the **default timings** (lease TTL
``controllerHeartBeatTimeoutMills`` 5 s, scan every 500 ms, heartbeat every 1 s). Producers
(the SDK, 128 B bodies) send throughout.

1. RTO: ``--kills`` times the master is SIGKILLed; the time from the kill to the first
   acknowledged send after it (necessarily on the new master), p50/p99. Target p99 < 10 s.
2. RPO: acknowledged messages missing from the final master: must print 0.
3. Throughput: msgs/s of the same producers against controller mode and against a plain
   SYNC_MASTER + SLAVE pair (issue 16's replication) in the same run, and their ratio.

It reuses the test suite's process helpers (``tests/plugins/controller``), so what it measures
is what the tests start.

    ./run bench failover [--kills 20] [--seconds 5] [--producers 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.network.wire import pulled_bodies  # noqa: E402
from tests.plugins.controller.replicas import ReplicaCluster, replica_cluster  # noqa: E402
from tests.plugins.ha.processes import ha_cluster  # noqa: E402
from tests.plugins.ha.test_replication import wait_connected  # noqa: E402
from trocket import Message, Producer  # noqa: E402
from trocket.client.errors import ClientError  # noqa: E402
from wire.remoting import RemotingClient  # noqa: E402

TOPIC = "BenchFailover"
BODY = b"x" * 120
DEFAULT_TIMINGS = ""  # the controller's own defaults


async def load(
    namesrv: str, producers: int, stop: trio.Event, acked: dict[bytes, tuple[float, float]]
) -> None:
    """``producers`` senders until ``stop``; each acknowledged body with when its send began
    and when it was acknowledged."""
    producer = Producer("bench-failover", namesrv_addr=namesrv, send_timeout=3.0)

    async def sender(p: int) -> None:
        i = 0
        while not stop.is_set():
            body = b"%d-%d-" % (p, i) + BODY
            began = time.monotonic()
            try:
                result = await producer.send(Message(TOPIC, body))
            except ClientError:
                await trio.sleep(0.02)
                continue
            if result.status.name == "SEND_OK":
                acked[body] = (began, time.monotonic())
                i += 1

    async with producer, trio.open_nursery() as nursery:
        for p in range(producers):
            nursery.start_soon(sender, p)


async def throughput(namesrv: str, producers: int, seconds: float) -> float:
    acked: dict[bytes, tuple[float, float]] = {}
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load, namesrv, producers, stop, acked)
        await trio.sleep(1)  # routes learned, topic created
        start, count = time.monotonic(), len(acked)
        await trio.sleep(seconds)
        rate = (len(acked) - count) / (time.monotonic() - start)
        stop.set()
    return rate


async def failover_run(
    root: Path, kills: int, producers: int, seconds: float
) -> tuple[list[float], int, int, float]:
    with replica_cluster(root, timings=DEFAULT_TIMINGS) as cluster:
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id, catchup="15s")
        await cluster.wait_master(in_set=3, timeout=120)
        rate = await throughput(cluster.ha.namesrv_addr, producers, seconds)
        print(f"controller mode (3 replicas, SYNC_MASTER): {rate:,.0f} msgs/s", flush=True)
        acked: dict[bytes, tuple[float, float]] = {}
        stop = trio.Event()
        rtos: list[float] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(load, cluster.ha.namesrv_addr, producers, stop, acked)
            for kill in range(kills):
                master = await cluster.wait_master(in_set=2, timeout=120)
                await trio.sleep(0.5)
                killed_at = time.monotonic()
                cluster.replicas[master].kill()
                # The first acknowledgement of a send begun after the kill (one begun before may
                # have been answered by the old master just before it died).
                recent = lambda: list(acked.values())[-producers * 4 :]  # noqa: E731
                while not (after := [done for began, done in recent() if began > killed_at]):  # noqa: ASYNC110
                    await trio.sleep(0.01)
                rtos.append(min(after) - killed_at)
                new = await cluster.wait_master(not_id=master, timeout=120)
                print(f"kill {kill + 1}/{kills}: master {master} -> {new}, RTO {rtos[-1]:.2f} s", flush=True)
                await trio.to_thread.run_sync(cluster.restart, master)
            final = await cluster.wait_master(in_set=3, timeout=120)
            stop.set()
        lost = await missing(cluster, final, set(acked))
        return rtos, len(acked), lost, rate


async def missing(cluster: ReplicaCluster, master: int, acked: set[bytes]) -> int:
    async with RemotingClient.open() as client:
        held = set(await pulled_bodies(client, cluster.replicas[master].addr, TOPIC, 16))
    return len(acked - held)


async def sync_master_rate(root: Path, producers: int, seconds: float) -> float:
    with ha_cluster(root) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0)
        cluster.start_broker("slave", "SLAVE", 1)
        await trio.to_thread.run_sync(wait_connected, cluster, master)
        rate = await throughput(cluster.namesrv_addr, producers, seconds)
    print(f"plain SYNC_MASTER + SLAVE: {rate:,.0f} msgs/s", flush=True)
    return rate


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        root = Path(tmp)
        (root / "plain").mkdir()
        (root / "auto").mkdir()
        baseline = await sync_master_rate(root / "plain", args.producers, args.seconds)
        rtos, acked, lost, rate = await failover_run(root / "auto", args.kills, args.producers, args.seconds)
    print()
    print(
        f"RTO over {len(rtos)} SIGKILLs: p50 {statistics.median(rtos):.2f} s, "
        f"p99 {percentile(rtos, 0.99):.2f} s, max {max(rtos):.2f} s (target p99 < 10 s)"
    )
    print(f"RPO: {lost} of {acked:,} acknowledged messages lost (must be 0)")
    print(
        f"throughput: controller mode {rate:,.0f} msgs/s, plain SYNC_MASTER {baseline:,.0f} msgs/s, "
        f"ratio {rate / baseline:.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=16)
    trio.run(main, parser.parse_args())
