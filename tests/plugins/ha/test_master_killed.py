"""A master SIGKILLed under load by 64 producers (issue 16). SYNC_MASTER: every acknowledged
message is on the slave, and a consumer that only knows the NameServer reads it there.
ASYNC_MASTER: what is lost lies beyond what the slave held at the kill, and is counted."""

from __future__ import annotations

import shutil
import signal

import pytest
import trio

from tests.network.wire import pulled_bodies, send_request
from tests.plugins.ha.processes import HaCluster, Process, ha_cluster
from tests.plugins.ha.test_replication import wait_connected
from tests.support import consume_bodies
from wire import record
from wire.remoting import RemotingClient, ResponseCode

TOPIC = "Killed"
PRODUCERS = 64
QUEUES = 4


async def load_until_killed(
    master: Process, *, acks_before_kill: int, freeze: bool = False
) -> dict[bytes, int]:
    """64 producers send until the master dies (SIGKILL, or with ``freeze`` SIGSTOP: it stops
    mid-write and its sockets go silent without a FIN, as at a power cut); returns acknowledged
    bodies → physical offset."""
    acked: dict[bytes, int] = {}

    async def producer(client: RemotingClient, p: int) -> None:
        for i in range(1_000_000):
            body = f"p{p}-{i}".encode()
            try:
                response = await client.invoke(master.addr, send_request(TOPIC, body, queue_id=i % QUEUES), 3)
            except Exception:  # noqa: BLE001 - the master is gone: this producer is done
                return
            if response.code == ResponseCode.SUCCESS:
                acked[body] = record.parse_offset_msg_id(response.ext["msgId"])[1]
            elif response.code not in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE):
                raise AssertionError(f"unexpected answer {response.code}: {response.remark}")

    async def killer() -> None:
        while len(acked) < acks_before_kill:  # noqa: ASYNC110 - waits on the producers' progress
            await trio.sleep(0.01)
        if freeze:
            master.process.send_signal(signal.SIGSTOP)
        else:
            master.kill()

    async with RemotingClient.open() as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(killer)
            for p in range(PRODUCERS):
                nursery.start_soon(producer, client, p)
    return acked


async def read_from_slave_through_the_namesrv(cluster: HaCluster, wanted: set[bytes]) -> set[bytes]:
    """A group-less subscriber that knows only the NameServer: the master is gone from the
    route, so the SDK reads the broker's queues from its slave."""
    return await consume_bodies(cluster.namesrv_addr, "CG_after_kill", TOPIC, wanted, 90)


async def slave_bodies(slave: Process) -> set[bytes]:
    async with RemotingClient.open() as client:
        return set(await pulled_bodies(client, slave.addr, TOPIC, QUEUES))


async def test_sync_master_killed_under_64_producers_loses_nothing_acknowledged(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0)
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        acked = await load_until_killed(master, acks_before_kill=3_000)
        assert len(acked) >= 3_000
        seen = await read_from_slave_through_the_namesrv(cluster, set(acked))
        missing = set(acked) - seen
        assert not missing, f"{len(missing)} acknowledged messages are not on the slave"
        # Even with the master's whole store gone (disk loss), the slave holds everything.
        assert master.data_dir is not None
        assert set(acked) <= await slave_bodies(slave)


@pytest.mark.parametrize("kill", range(3))
async def test_async_master_losses_lie_beyond_what_the_slave_held(tmp_path, kill):
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "ASYNC_MASTER", 0)
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        acked = await load_until_killed(master, acks_before_kill=3_000 + 1_000 * kill)
        await trio.sleep(1)
        held = int(cluster.figures(slave)["commitLogMaxOffset"])  # end of its whole records
        on_slave = await slave_bodies(slave)
        lost = {body: offset for body, offset in acked.items() if body not in on_slave}
        assert all(offset >= held for offset in lost.values()), "a loss below the slave's end"
        print(f"ASYNC_MASTER kill {kill}: {len(acked)} acknowledged, {len(lost)} lost (RPO)")


async def test_sync_master_frozen_like_a_power_cut_then_its_disk_lost_loses_nothing_acknowledged(tmp_path):
    """The master stops dead mid-load (SIGSTOP: no FIN, no more writes, as a power cut leaves
    its peers), then its whole store is deleted (the disk is gone): every acknowledged message
    is on the slave."""
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0)
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        acked = await load_until_killed(master, acks_before_kill=3_000, freeze=True)
        master.kill()
        assert master.data_dir is not None
        shutil.rmtree(master.data_dir)
        missing = set(acked) - await slave_bodies(slave)
        assert len(acked) >= 3_000 and not missing, f"{len(missing)} acknowledged messages lost"
