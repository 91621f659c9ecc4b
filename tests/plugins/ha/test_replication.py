"""Master/slave replication between real processes over real TCP (issue 16): byte-identical
logs after mixed load and file rolls, a slave that restarts or starts late, a slave killed
under SYNC_MASTER."""

from __future__ import annotations

import json
import time

import trio

from kernel.persist import read_json_with_backup
from tests.network.wire import batch_body, send_request
from tests.plugins.ha.processes import HaCluster, Process, commit_log_bytes, ha_cluster
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

TOPIC = "Replicated"


async def send_mixed(client: RemotingClient, master: str, count: int, *, start: int = 0) -> list[int]:
    """``count`` messages as single sends and batches of 50, 16 requests in flight; returns the
    response codes."""
    codes: list[int] = []
    requests = []
    i = start
    while i < start + count:
        if (i // 50) % 3 == 0:
            entries = [(f"b{j}".encode() * (1 + j % 9), {"KEYS": f"k{j}"}) for j in range(i, i + 50)]
            requests.append(
                send_request(TOPIC, batch_body(entries), queue_id=i % 4, code=RequestCode.SEND_BATCH_MESSAGE)
            )
            i += 50
        else:
            requests.append(send_request(TOPIC, f"s{i}".encode() * (1 + i % 13), queue_id=i % 4, tags="t"))
            i += 1

    async def worker(chunk: list) -> None:
        for request in chunk:
            codes.append((await client.invoke(master, request, 15)).code)

    async with trio.open_nursery() as nursery:
        for w in range(16):
            nursery.start_soon(worker, requests[w::16])
    return codes


def wait_connected(cluster: HaCluster, master: Process, slaves: int = 1, timeout: float = 30) -> None:
    """Until ``slaves`` slaves are connected and in sync (a slave learns where its master
    listens from the NameServer, after its first registration)."""
    deadline = time.monotonic() + timeout
    while int(cluster.figures(master).get("haInSyncSlaves", "0")) < slaves:
        if time.monotonic() > deadline:
            raise AssertionError(f"no slave connected to {master.addr}:\n{master.text()[-3000:]}")
        time.sleep(0.1)


def wait_caught_up(cluster: HaCluster, master: Process, slave: Process, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while True:
        end = int(cluster.figures(master)["commitLogMaxOffset"])
        held = int(cluster.figures(slave).get("haReceivedEnd", "-1"))
        if held == end:
            return end
        if time.monotonic() > deadline:
            raise AssertionError(f"slave holds {held} of the master's {end} bytes:\n{slave.text()[-3000:]}")
        time.sleep(0.2)


async def test_slave_log_is_byte_identical_after_100k_mixed_messages_restart_and_late_start(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0)
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        async with RemotingClient.open() as client:
            codes = await send_mixed(client, master.addr, 100_000)
        assert set(codes) == {ResponseCode.SUCCESS}, "every SYNC_MASTER send was acknowledged by the slave"
        end = wait_caught_up(cluster, master, slave)
        assert end > 3 * 4 * 2**20, "several file rolls"
        assert commit_log_bytes(slave.data_dir, end) == commit_log_bytes(master.data_dir, end)

        # A slave killed and restarted continues from its own end, not from zero.
        slave.kill()
        async with RemotingClient.open() as client:
            codes = await send_mixed(client, master.addr, 2_000, start=100_000)
        assert ResponseCode.SUCCESS not in codes[-10:], (
            "no slave: the last sends are not acknowledged as SEND_OK"
        )
        slave = cluster.restart(slave)
        end = wait_caught_up(cluster, master, slave)
        assert "this log ends at 0" not in slave.text().split("config: ")[-1]
        assert commit_log_bytes(slave.data_dir, end) == commit_log_bytes(master.data_dir, end)

        # A slave started against a master with history copies it from zero.
        late = cluster.start_broker("late", "SLAVE", 2)
        end = wait_caught_up(cluster, master, late)
        assert commit_log_bytes(late.data_dir, end) == commit_log_bytes(master.data_dir, end)
        # Its own dispatch built the consume queues: the same offsets as on the master.
        status = cluster.admin_json("topicStatus", "-t", TOPIC)
        assert sum(int(row["#Max Offset"]) for row in status) == 102_000  # type: ignore[index, union-attr]


async def test_slave_killed_under_sync_master_then_catches_up_with_nothing_lost(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0, ha='sync_timeout = "1s"')
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        async with RemotingClient.open() as client:
            first = await client.invoke(master.addr, send_request(TOPIC, b"before"), 10)
            assert first.code == ResponseCode.SUCCESS
            slave.kill()
            statuses = []
            for i in range(20):
                response = await client.invoke(master.addr, send_request(TOPIC, f"during{i}".encode()), 10)
                statuses.append(response.code)
                assert "msgId" in response.ext, "stored on the master whatever the slave"
            assert set(statuses) <= {ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT}
            assert statuses[-1] == ResponseCode.SLAVE_NOT_AVAILABLE
        slave = cluster.restart(slave)
        end = wait_caught_up(cluster, master, slave)
        assert commit_log_bytes(slave.data_dir, end) == commit_log_bytes(master.data_dir, end)
        async with RemotingClient.open() as client:
            again = await client.invoke(master.addr, send_request(TOPIC, b"after"), 10)
            assert again.code == ResponseCode.SUCCESS


async def test_slave_copies_topics_offsets_groups_and_delay_progress_from_its_master(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        fast = '[retry_dlq]\nprogress_persist_interval = "200ms"\n'
        master = cluster.start_broker(
            "master", "ASYNC_MASTER", 0, tables=fast, extra='message_delay_level = "1s"'
        )
        slave = cluster.start_broker("slave", "SLAVE", 1, tables=fast, extra='message_delay_level = "1s"')
        wait_connected(cluster, master)
        async with RemotingClient.open() as client:
            delayed = send_request(TOPIC, b"later", properties={"DELAY": "1"})
            assert (await client.invoke(master.addr, delayed, 10)).code == ResponseCode.SUCCESS
            update = RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "CG_synced", "topic": TOPIC, "queueId": 0, "commitOffset": 7},
            )
            assert (await client.invoke(master.addr, update, 10)).code == ResponseCode.SUCCESS
        assert master.data_dir is not None and slave.data_dir is not None
        master_delay = master.data_dir / "config" / "delayOffset.json"
        slave_delay = slave.data_dir / "config" / "delayOffset.json"
        deadline = time.monotonic() + 30
        while True:
            # Read as the brokers do: a state file is replaced by moving it to .bak first, so a
            # reader between the two renames finds only the backup.
            master_table, slave_table = (
                read_json_with_backup(master_delay),
                read_json_with_backup(slave_delay),
            )
            copied = (
                master_table is not None  # the slave may copy the table before the master writes it
                and slave_table == master_table
                and master_table["offsetTable"].get("1") == 1
            )
            offsets_file = slave.data_dir / "config" / "consumerOffset.json"
            offsets = read_json_with_backup(offsets_file) or {"offsetTable": {}}
            if copied and offsets["offsetTable"].get(f"{TOPIC}@CG_synced") == {"0": 7}:
                break
            assert time.monotonic() < deadline, f"not copied:\n{slave.text()[-2000:]}"
            await trio.sleep(0.2)
        topics = json.loads((slave.data_dir / "config" / "topics.json").read_text())["topicConfigTable"]
        assert TOPIC in topics
