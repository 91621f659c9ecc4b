"""A master that loses the tail of its log (a power cut: pages never flushed come back as
zeros) and restarts while its slave still holds that tail: the controller gives the restarted
master a new epoch, so the slave compares histories, cuts the tail and copies the master's new
records. Before the fix the epoch stayed the same, the slave kept the old bytes, and the two
logs held different messages at the same offsets (fault scenario S8 on a 2-core machine)."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from tests.plugins.controller.replicas import ReplicaCluster, replica_cluster
from tests.plugins.ha.processes import commit_log_bytes
from tests.plugins.ha.test_replication import wait_caught_up
from trocket import Message, Producer
from wire.record import parse_offset_msg_id

TOPIC = "Restarted"


def zero_from(data_dir: Path, offset: int) -> None:
    """What a power cut leaves of the first commit-log file: the bytes from ``offset`` on were
    never written to the disk."""
    path = next((data_dir / "commitlog").iterdir())
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(bytes(path.stat().st_size - offset))


async def test_a_slave_cuts_the_tail_its_restarted_master_lost(tmp_path: Path):
    with replica_cluster(tmp_path) as cluster:
        cluster.start_replica(1)
        cluster.start_replica(2)
        master = await cluster.wait_master(in_set=2)
        slave = 2 if master == 1 else 1
        namesrv = cluster.ha.namesrv_addr
        async with Producer("restarted", namesrv_addr=namesrv) as producer:
            offsets = []
            for i in range(20):
                result = await producer.send(Message(TOPIC, f"before-{i}".encode()))
                assert result.status.name == "SEND_OK"
                offsets.append(parse_offset_msg_id(result.offset_msg_id)[1])
        old_epoch = int((await cluster.replica_info())["masterEpoch"])

        # The slave paused until the set is the master alone (it cannot be elected), then the
        # master killed and its last ten records lost, as a power cut would.
        cluster.replicas[slave].process.send_signal(signal.SIGSTOP)
        try:
            await lose_the_tail_and_restart(cluster, master, offsets[10])
        finally:
            cluster.replicas[slave].process.send_signal(signal.SIGCONT)
        assert int((await cluster.replica_info())["masterEpoch"]) == old_epoch + 1
        data_dir = cluster.replicas[master].data_dir
        assert data_dir is not None

        async with Producer("restarted-after", namesrv_addr=namesrv) as producer:
            for i in range(40):
                assert (await producer.send(Message(TOPIC, f"after-{i}".encode()))).status.name == "SEND_OK"
        end = await trio.to_thread.run_sync(
            wait_caught_up, cluster.ha, cluster.replicas[master], cluster.replicas[slave]
        )
        slave_dir = cluster.replicas[slave].data_dir
        assert slave_dir is not None
        assert commit_log_bytes(slave_dir, end) == commit_log_bytes(data_dir, end)
        assert "diverges from master" in cluster.replicas[slave].text()


async def lose_the_tail_and_restart(cluster: ReplicaCluster, master: int, lost_from: int) -> None:
    """With the slave paused: wait until the set is the master alone (the slave cannot be
    elected), kill the master, lose its log from ``lost_from``, restart it."""
    with trio.fail_after(30):
        while await cluster.sync_state_set() != [master]:  # noqa: ASYNC110 - polls the controller
            await trio.sleep(0.2)
    cluster.replicas[master].kill()
    data_dir = cluster.replicas[master].data_dir
    assert data_dir is not None
    zero_from(data_dir, lost_from)
    await trio.to_thread.run_sync(cluster.restart, master)
    assert await cluster.wait_master() == master
