"""Three etcd members and two controllers under three replicas: one etcd member SIGKILLed
(failover still works), every member down (nothing is elected, the master fences itself, and
both sides log it), and the mqadmin controller commands against the running set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from tests.interop.conftest import subprocess_env
from tests.plugins.controller.replicas import BROKER_NAME, replica_cluster
from trocket import Message, Producer


def admin(namesrv: str, *args: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", "trocket", "admin", args[0], "-n", namesrv, *args[1:], "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def send_ok(producer: Producer, body: bytes) -> bool:
    try:
        return (await producer.send(Message("Members", body))).status.name == "SEND_OK"
    except Exception:  # noqa: BLE001 - a failover in progress
        return False


async def test_etcd_member_loss_and_total_outage(tmp_path: Path):
    with replica_cluster(tmp_path, etcd_members=3, controllers=2) as cluster:
        for broker_id in (1, 2, 3):
            cluster.start_replica(broker_id)
        master = await cluster.wait_master(in_set=3)
        controller = cluster.controller_addrs[0]
        namesrv = cluster.ha.namesrv_addr

        rows = await trio.to_thread.run_sync(admin, namesrv, "getSyncStateSet", "-a", controller)
        assert {(r["#BrokerId"], r["#Master"], r["#InSyncStateSet"], r["#Alive"]) for r in rows} == {
            (i, i == master, True, True) for i in (1, 2, 3)
        }
        meta = {
            r["#Key"]: r["#Value"]
            for r in await trio.to_thread.run_sync(admin, namesrv, "getControllerMetaData", "-a", controller)
        }
        assert meta["controllerLeaderAddress"] in cluster.controller_addrs
        assert len(meta["peers"].split(";")) == 2
        epochs = await trio.to_thread.run_sync(admin, namesrv, "getBrokerEpoch", "-b", BROKER_NAME)
        assert {(r["#Epoch"], r["#StartOffset"]) for r in epochs} == {(1, 0)}

        # electMaster moves the master to a designated member of the set.
        target = next(i for i in (1, 2, 3) if i != master)
        await trio.to_thread.run_sync(
            admin, namesrv, "electMaster", "-a", controller, "-b", BROKER_NAME, "-i", str(target)
        )
        master = await cluster.wait_master(not_id=master)
        assert master == target

        async with Producer("members", namesrv_addr=namesrv) as producer:
            assert await send_ok(producer, b"one")
            # One etcd member of three SIGKILLed: a killed master is still replaced.
            cluster.etcd.members[0].kill()
            await cluster.wait_master(in_set=2)
            cluster.replicas[master].kill()
            new = await cluster.wait_master(not_id=master, timeout=60)
            with trio.fail_after(30):
                while not await send_ok(producer, b"after one etcd member died"):  # noqa: ASYNC110 - retries a send
                    await trio.sleep(0.2)
            await trio.to_thread.run_sync(cluster.restart, master)
            await cluster.wait_master(in_set=2)

            # Every etcd member down: no election, and the master, whose lease nobody renews,
            # fences itself (a controller cut from etcd cannot tell that from etcd being down
            # for every controller, so it renews nothing): sends are refused, none acknowledged.
            elected = "".join(c.text() for c in cluster.controllers).count("elected master")
            for member in cluster.etcd.members:
                member.kill()
            await trio.sleep(6)  # longer than a lease: nothing may be elected
            assert not any([await send_ok(producer, f"etcd down {i}".encode()) for i in range(3)])
            replica_logs = "".join(cluster.replicas[i].text() for i in (1, 2, 3))
            assert "reports etcd down" in replica_logs
            assert "lost its controller lease (fenced)" in replica_logs
            controller_logs = "".join(c.text() for c in cluster.controllers)
            assert "cannot reach etcd" in controller_logs
            assert "".join(c.text() for c in cluster.controllers).count("elected master") == elected

            # etcd back: the same master, heartbeats renew its lease.
            for member in cluster.etcd.members:
                cluster.etcd.restart(member)
            await trio.to_thread.run_sync(cluster.etcd.wait_healthy)
            assert await cluster.wait_master(in_set=2, timeout=60) == new
            # The first heartbeats after the restart may take longer than the lease (etcd
            # electing its leader): the master stays fenced until one answers in time.
            with trio.fail_after(15):
                while not await send_ok(producer, b"etcd back"):  # noqa: ASYNC110 - retries a send
                    await trio.sleep(0.2)
