"""A controller-mode master that steps down shows consumers nothing its SyncStateSet never
acknowledged: chaos finding 8 (fault scenario S1), reproduced in one process.

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


def _replica(broker_factory, tmp_path):
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
            "sync_timeout": "200ms",
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
