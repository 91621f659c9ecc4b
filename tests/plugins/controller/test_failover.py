"""Automatic failover with real etcd, controllers and replicas as processes."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from tests.network.wire import send_request
from tests.plugins.controller.replicas import replica_cluster
from trocket import Message, Producer
from wire.remoting import RemotingClient, RemotingCommand, ResponseCode


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


async def test_a_stalled_slave_leaves_the_sync_state_set_and_rejoins_and_a_learner_never_enters(
    tmp_path: Path,
):
    """A SyncStateSet member frozen with SIGSTOP is removed after haMaxTimeSlaveNotCatchup (3 s
    here): SYNC_MASTER puts stop waiting for it. Resumed, it catches up and is added back. An
    async learner copies the log but is never added."""
    with replica_cluster(tmp_path) as cluster:
        cluster.start_replica(1)
        cluster.start_replica(2)
        master = await cluster.wait_master(in_set=2)
        learner = cluster.start_replica(3, ha="async_learner = true")
        slave = 2 if master == 1 else 1
        async with Producer("stalled", namesrv_addr=cluster.ha.namesrv_addr) as producer:
            for i in range(20):
                assert (await producer.send(Message("Stalled", f"m{i}".encode()))).status.name == "SEND_OK"
            await trio.sleep(3)
            assert await cluster.sync_state_set() == sorted({master, slave}), "the learner stays out"
            figures = await trio.to_thread.run_sync(cluster.ha.figures, learner)
            assert int(figures["haReceivedEnd"]) > 0, "the learner copies the log"

            cluster.replicas[slave].process.send_signal(signal.SIGSTOP)
            try:
                with trio.fail_after(30):
                    while await cluster.sync_state_set() != [master]:  # noqa: ASYNC110 - polls the controller
                        await trio.sleep(0.3)
                result = await producer.send(Message("Stalled", b"without the frozen slave"))
                assert result.status.name == "SEND_OK"
            finally:
                cluster.replicas[slave].process.send_signal(signal.SIGCONT)
            with trio.fail_after(30):
                while await cluster.sync_state_set() != sorted({master, slave}):  # noqa: ASYNC110 - polls
                    await trio.sleep(0.3)
        log = cluster.replicas[master].text()
        assert f"replicas [{slave}] left the SyncStateSet" in log
        assert f"replicas [{slave}] joined the SyncStateSet" in log


async def test_min_in_sync_replicas_refuses_puts_while_the_master_is_alone_in_its_set(tmp_path: Path):
    """``minInSyncReplicas = 2``: with its only slave frozen out of the SyncStateSet, the
    SYNC_MASTER refuses sends ("in-sync replicas not enough", nothing stored) instead of
    acknowledging what only its own disk holds; a send already waiting for the slave when the
    set shrank is not acknowledged either (it was appended with two replicas needed, and the
    shrunken set's confirm offset is the master's alone: FLUSH_SLAVE_TIMEOUT, never SEND_OK);
    with the slave back, sends are acknowledged."""
    with replica_cluster(tmp_path) as cluster:
        for broker_id in (1, 2):
            cluster.start_replica(broker_id, ha="min_in_sync_replicas = 2", catchup="1s")
        master = await cluster.wait_master(in_set=2)
        slave = 2 if master == 1 else 1
        address = cluster.replicas[master].addr
        while_frozen: list[RemotingCommand] = []

        async def send_until_refused() -> None:
            """One send after another, each waiting for the frozen slave until it times out,
            until the master refuses: the last waits are cut short by the set shrinking."""
            async with RemotingClient.open() as other:
                while not while_frozen or "in-sync replicas not enough" not in (
                    while_frozen[-1].remark or ""
                ):
                    while_frozen.append(await other.invoke(address, send_request("MinSync", b"frozen"), 40))

        async with RemotingClient.open() as client:
            first = await client.invoke(address, send_request("MinSync", b"with both"), 10)
            assert first.code == ResponseCode.SUCCESS, first.remark
            cluster.replicas[slave].process.send_signal(signal.SIGSTOP)
            try:
                with trio.fail_after(30):
                    await send_until_refused()
                assert await cluster.sync_state_set() == [master]
                codes = [answer.code for answer in while_frozen]
                assert ResponseCode.SUCCESS not in codes, [(a.code, a.remark) for a in while_frozen]
                assert ResponseCode.FLUSH_SLAVE_TIMEOUT in codes
                refused = await client.invoke(address, send_request("MinSync", b"alone"), 10)
                assert refused.code == ResponseCode.SYSTEM_ERROR
                assert (
                    "in-sync replicas not enough" in refused.remark
                    and "2 minInSyncReplicas" in refused.remark
                )
            finally:
                cluster.replicas[slave].process.send_signal(signal.SIGCONT)
            with trio.fail_after(30):
                while await cluster.sync_state_set() != sorted({master, slave}):  # noqa: ASYNC110 - polls
                    await trio.sleep(0.3)
            again = await client.invoke(address, send_request("MinSync", b"both again"), 10)
            assert again.code == ResponseCode.SUCCESS, again.remark


async def test_members_leave_the_sync_state_set_only_after_the_master_flushed_what_they_held(tmp_path: Path):
    """Chaos finding 10 (S8, async flush, ``min_in_sync_replicas = 2``): sends acknowledged by
    master and slave, fewer than the four pages the interval flush waits for, so only in the
    master's page cache and the slave's log. Once the frozen slave leaves the set, the
    controller would elect only the master, so a power cut of it would lose them: the master
    flushes them before the slave leaves. The thorough flush is an hour away here, so nothing
    else flushes them."""
    with replica_cluster(tmp_path) as cluster:
        for broker_id in (1, 2):
            cluster.start_replica(
                broker_id,
                ha="min_in_sync_replicas = 2",
                catchup="1s",
                tables='[flush_async]\nthorough_interval = "1h"\n',
            )
        master = await cluster.wait_master(in_set=2)
        slave = 2 if master == 1 else 1
        address = cluster.replicas[master].addr
        async with RemotingClient.open() as client:
            for number in range(5):
                answer = await client.invoke(address, send_request("ShrinkFlush", b"acked %d" % number), 10)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
        before = cluster.ha.figures(cluster.replicas[master])
        acknowledged_end = int(before["commitLogMaxOffset"])
        assert int(before["commitLogFlushedOffset"]) < acknowledged_end, before  # in the page cache only
        cluster.replicas[slave].process.send_signal(signal.SIGSTOP)
        try:
            with trio.fail_after(30):
                while await cluster.sync_state_set() != [master]:  # noqa: ASYNC110 - polls the controller
                    await trio.sleep(0.2)
            after = cluster.ha.figures(cluster.replicas[master])
            assert int(after["commitLogFlushedOffset"]) >= acknowledged_end, after
        finally:
            cluster.replicas[slave].process.send_signal(signal.SIGCONT)
