"""``enableElectUncleanMaster``: when the master dies and the only live replica had left the
SyncStateSet, a controller refuses to elect it (and says why) unless unclean elections are
enabled; then it elects it with a loud warning, the messages only the dead master held are
lost, and the old master, restarted, drops them (the count is logged)."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.plugins.controller.replicas import replica_cluster
from tests.plugins.controller.test_controller import TEST_TIMINGS, start_controller
from tests.support import consume_bodies
from trocket import Message, Producer

TOPIC = "Unclean"


async def test_an_out_of_set_replica_is_elected_only_when_unclean_elections_are_enabled(tmp_path: Path):
    with replica_cluster(tmp_path) as cluster:
        cluster.start_replica(1)
        cluster.start_replica(2)
        master = await cluster.wait_master(in_set=2)
        slave = 2 if master == 1 else 1
        namesrv = cluster.ha.namesrv_addr
        async with Producer("unclean", namesrv_addr=namesrv) as producer:
            for i in range(10):
                assert (await producer.send(Message(TOPIC, f"both-{i}".encode()))).status.name == "SEND_OK"
            cluster.replicas[slave].kill()
            with trio.fail_after(30):
                while await cluster.sync_state_set() != [master]:  # noqa: ASYNC110 - polls the controller
                    await trio.sleep(0.3)
            for i in range(10):
                result = await producer.send(Message(TOPIC, f"master-only-{i}".encode()))
                assert result.status.name == "SEND_OK"
        cluster.replicas[master].kill()
        await trio.to_thread.run_sync(cluster.restart, slave)  # alive again, outside the set

        # The strict default: nothing is elected, and the controller says why.
        controller = cluster.controllers[0]
        with trio.fail_after(30):
            while "enableElectUncleanMaster is false" not in controller.text():  # noqa: ASYNC110 - polls a log
                await trio.sleep(0.3)
        info = await cluster.replica_info()
        assert int(info["masterBrokerId"]) == master, "no replica outside the set was elected"

        # The same controller restarted with unclean elections enabled elects the slave.
        controller.kill()
        port = int(controller.addr.rsplit(":", 1)[1])
        unclean = start_controller(
            tmp_path, "unclean", cluster.etcd, TEST_TIMINGS + "\nenable_elect_unclean_master = true", port
        )
        cluster.controllers[0] = unclean
        cluster.ha.processes.append(unclean)
        assert await cluster.wait_master(not_id=master) == slave
        assert "UNCLEAN election" in unclean.text()

        async with Producer("unclean-after", namesrv_addr=namesrv) as producer:
            with trio.fail_after(30):
                while True:
                    try:
                        if (await producer.send(Message(TOPIC, b"after"))).status.name == "SEND_OK":
                            break
                    except Exception:  # noqa: BLE001 - the route is moving to the new master
                        await trio.sleep(0.2)
        wanted = {f"both-{i}".encode() for i in range(10)} | {b"after"}
        bodies = await consume_bodies(namesrv, "CG_unclean", TOPIC, wanted, 20)
        assert wanted <= bodies
        assert not any(body.startswith(b"master-only") for body in bodies), "only the dead master held them"

        # The old master rejoins as a slave and drops what the new master never had.
        await trio.to_thread.run_sync(cluster.restart, master)
        with trio.fail_after(60):
            while "diverges from master" not in cluster.replicas[master].text():  # noqa: ASYNC110 - polls a log
                await trio.sleep(0.3)
        assert await cluster.wait_master(in_set=2) == slave
