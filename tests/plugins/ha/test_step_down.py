"""A controller-mode master that steps down shows consumers nothing its SyncStateSet never
acknowledged (chaos finding 8, fault scenario S1) and acknowledges none of the puts that were
waiting for their replicas (chaos finding 11, fault scenario S5), reproduced in one process.

The replica is driven through its controller agent as the controller's answers would drive it
(the controller address it is given answers nobody), so the interleaving that S1 hit once in a
full run (a deposed master, resumed after a pause, appends a send still queued on its socket,
then steps down before comparing its history with the new master's) happens every time.
"""

from __future__ import annotations

import trio

from kernel.model import Message, MessageBatch, PutStatus
from plugins.ha import AGENT
from plugins.ha.controller_agent import MasterView
from tests.network.conftest import free_port
from tests.plugins.store_mmap.test_sync_overlap import wire_batch


def _replica(broker_factory, tmp_path, sync_timeout: str = "200ms"):
    return broker_factory(
        plugins=["store_mmap", "ha"],
        store="mmap",
        broker={
            "data_dir": str(tmp_path / "r1"),
            "broker_role": "SYNC_MASTER",
            "broker_id": 1,
            "replicator": "ha",
        },
        store_mmap={"commit_log_file_size": 64 * 1024},
        ha={
            "controller_mode": True,
            "controller_addr": [f"127.0.0.1:{free_port()}"],  # nobody: the test plays the controller
            "listen_port": free_port(),
            "sync_timeout": sync_timeout,
        },
    )


async def test_a_master_that_steps_down_does_not_show_its_unconfirmed_tail(broker_factory, tmp_path):
    async with _replica(broker_factory, tmp_path) as broker:
        agent = broker.ctx.stash[AGENT]
        replicator = broker.replicator
        store = broker.store
        # Master of epoch 1 with replica 2 in its set: nothing is confirmed until 2 acknowledges.
        await agent.apply(MasterView(1, "127.0.0.1:1", "127.0.0.1:2", 1, frozenset({1, 2}), 1))
        replicator.lease_deadline = trio.current_time() + 60
        result = await broker.put(MessageBatch([Message("StepDown", b"never acknowledged", queue_id=0)]))
        assert result.status is PutStatus.FLUSH_SLAVE_TIMEOUT, "replica 2 never acknowledged it"
        end = store.positions.wrote.value
        assert end > 0 and replicator.confirmed.value == 0
        record = store.read_raw(0, end)  # the same bytes, as the new master will send them later

        # Another replica was elected: this one steps down and follows nobody while it compares
        # histories (what _become_slave does first). Its unconfirmed tail stays invisible.
        broker.change_role(broker.role.SLAVE)
        replicator.become_slave("")
        await trio.sleep(0.3)  # the confirm offset's follower and dispatch had their turns
        assert replicator.confirmed.value == 0
        assert store.max_queue_offset("StepDown", 0) == 0, "a consumer could read the deposed tail"

        # The tail is cut at the consistent point. Following the new master, what it replicates
        # is confirmed as it arrives and consumers see it.
        await broker.truncate_log(0)
        replicator.truncated(0)
        assert store.positions.wrote.value == 0
        replicator.become_slave(f"127.0.0.1:{free_port()}")
        await store.append_raw(0, record)
        with trio.fail_after(10):
            while replicator.confirmed.value != end:  # noqa: ASYNC110 - no event for it
                await trio.sleep(0.02)
            await broker.wait_dispatched(end)
        assert store.max_queue_offset("StepDown", 0) == 1


async def _new_masters_log(broker_factory, tmp_path, length_at_least: int) -> bytes:
    """A log as another replica, elected meanwhile, holds it: a message of its own at offset 0,
    longer than ``length_at_least`` bytes of records."""
    async with broker_factory(
        plugins=["store_mmap"], store="mmap", broker={"data_dir": str(tmp_path / "new-master")}
    ) as new_master:
        body = b"the new master's message at that offset" * (length_at_least // 39 + 1)
        assert (await new_master.put(MessageBatch([Message("StepDown", body, queue_id=0)]))).ok
        return new_master.store.read_raw(0, new_master.store.positions.wrote.value)


async def _deposed_while_putting(broker, their_log: bytes, put) -> None:
    """Master of epoch 1 with replica 2 in its set (which never acknowledges): ``put`` starts,
    and once it appended, the replica is deposed as its agent would do it (steps down, cuts its
    tail, follows the new master) and receives ``their_log``."""
    agent = broker.ctx.stash[AGENT]
    replicator = broker.replicator
    store = broker.store
    await agent.apply(MasterView(1, "127.0.0.1:1", "127.0.0.1:2", 1, frozenset({1, 2}), 1))
    replicator.lease_deadline = trio.current_time() + 60
    async with trio.open_nursery() as nursery:
        nursery.start_soon(put)
        with trio.fail_after(10):
            while store.positions.wrote.value == 0:  # noqa: ASYNC110 - no event for it
                await trio.sleep(0.01)
        assert len(their_log) > store.positions.wrote.value, "their log passes what was put"
        broker.change_role(broker.role.SLAVE)
        replicator.become_slave("")
        await broker.truncate_log(0)
        replicator.truncated(0)
        replicator.become_slave(f"127.0.0.1:{free_port()}")
        await store.append_raw(0, their_log)


async def test_a_put_waiting_for_replicas_when_its_master_steps_down_is_not_acknowledged(
    broker_factory, tmp_path
):
    """Chaos finding 11: the put waits for replica 2; the replica is deposed, cuts its tail and
    follows the new master, whose log soon passes the put's end: the confirm offset, which now
    follows that log, reaches the put. It held another message there, so the put must be
    answered as not replicated (the client retries), not SEND_OK."""
    their_log = await _new_masters_log(broker_factory, tmp_path, 150)
    async with _replica(broker_factory, tmp_path, sync_timeout="30s") as broker:
        results = []

        async def put() -> None:
            batch = MessageBatch([Message("StepDown", b"waiting for replica 2", queue_id=0)])
            results.append(await broker.put(batch))

        await _deposed_while_putting(broker, their_log, put)
        (result,) = results
        assert broker.replicator.confirmed.value == len(their_log)
        assert result.status is PutStatus.FLUSH_SLAVE_TIMEOUT, "acknowledged by a deposed master"
        assert broker.replicator.deposed_puts == 1


async def test_a_batch_waiting_behind_a_deposed_masters_put_is_not_appended(broker_factory, tmp_path):
    """Batches read together are put as a group, a batch kept as the client encoded it appended
    and waited for before the next: the next must not be appended once the replica was deposed
    during that wait (its log is its new master's copy from then on)."""
    their_log = await _new_masters_log(broker_factory, tmp_path, 800)
    async with _replica(broker_factory, tmp_path, sync_timeout="30s") as broker:
        group = [MessageBatch(wire_batch("StepDown", 0, 2, tag), "group") for tag in ("first", "second")]
        results = []

        async def put_group() -> None:
            results.extend(await broker.put_group(group))

        await _deposed_while_putting(broker, their_log, put_group)
        first, second = results
        assert first.status is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert second.status is PutStatus.SERVICE_NOT_AVAILABLE and "SLAVE" in second.remark
        assert broker.store.positions.wrote.value == len(their_log), "nothing of its own after theirs"
