"""Transactions on a replicated pair of real processes. The master flushes and replicates
synchronously (SYNC_FLUSH, SYNC_MASTER); half messages, commits and op records reach the slave
as any record does, so a slave promoted after the master's SIGKILL ends the transactions that
were still open, and only those."""

from __future__ import annotations

import functools
import time

import trio

from tests.network.wire import pulled_bodies
from tests.plugins.ha.processes import HaCluster, Process, ha_cluster
from tests.plugins.ha.test_replication import wait_caught_up, wait_connected
from trocket import Message, TransactionProducer, TransactionState
from wire.remoting import RemotingClient

TOPIC = "HaTx"
GROUP = "PG_ha"
NEVER_CHECKS = """
[transaction]
check_interval = "1h"
op_batch_interval = "100ms"
"""
FAST_CHECKS = """
[transaction]
check_interval = "300ms"
timeout = "200ms"
op_batch_interval = "100ms"
"""


def decide(state: TransactionState):
    return lambda message, arg: state


def wait_figure(cluster: HaCluster, broker: Process, name: str, wanted: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while cluster.figures(broker).get(name) != wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} of {broker.name} is not {wanted}:\n{broker.text()[-3000:]}")
        time.sleep(0.1)


async def test_a_promoted_slave_resolves_the_open_transactions_and_only_those(tmp_path):
    database: dict[bytes, TransactionState] = {}
    checked: list[bytes] = []

    def check(message):
        checked.append(message.body)
        return database[message.body]

    with ha_cluster(tmp_path) as cluster:
        transaction = ("flush_sync", "transaction")
        master = cluster.start_broker(
            "master", "SYNC_MASTER", 0, plugins=transaction, extra='flush = "sync"', tables=NEVER_CHECKS
        )
        slave = cluster.start_broker("slave", "SLAVE", 1, plugins=transaction, tables=NEVER_CHECKS)
        wait_connected(cluster, master)
        async with TransactionProducer(GROUP, cluster.namesrv_addr, check_listener=check) as producer:
            for i in range(30):
                body = f"{('committed', 'rolled-back', 'open')[i % 3]}-{i}".encode()
                local = (TransactionState.COMMIT, TransactionState.ROLLBACK, TransactionState.UNKNOW)[i % 3]
                # What the application's database says when asked after the failover.
                database[body] = TransactionState.COMMIT if i % 2 == 0 else TransactionState.ROLLBACK
                if local is not TransactionState.UNKNOW:
                    database[body] = local
                await producer.send_message_in_transaction(Message(TOPIC, body), decide(local))
        wait_figure(cluster, master, "transactionOpPending", "0")
        wait_figure(cluster, master, "transactionHalfOpen", "10")
        wait_caught_up(cluster, master, slave)
        master.kill()

        slave.stop()
        promoted = cluster.start_broker("slave", "ASYNC_MASTER", 0, plugins=transaction, tables=FAST_CHECKS)
        async with TransactionProducer(
            GROUP, cluster.namesrv_addr, check_listener=check, heartbeat_interval=0.5
        ) as producer:
            with trio.fail_after(60):  # the route moves to the promoted broker when it registers
                while True:
                    try:
                        database[b"after"] = TransactionState.COMMIT
                        await producer.send_message_in_transaction(
                            Message(TOPIC, b"after"), decide(TransactionState.COMMIT)
                        )
                        break
                    except Exception:  # noqa: BLE001 - the route still names the dead master
                        await trio.sleep(0.5)
            # In a thread: the producer must keep running (writing its END, answering checks).
            pending = functools.partial(
                cluster.admin_json, "pendingTransactions", "-b", promoted.addr, "-g", GROUP
            )
            with trio.fail_after(60):
                while await trio.to_thread.run_sync(pending):  # noqa: ASYNC110 - polls a process
                    await trio.sleep(0.3)

        async with RemotingClient.open() as client:
            visible = await pulled_bodies(client, promoted.addr, TOPIC, 4)
        assert visible == {body: 1 for body, state in database.items() if state is TransactionState.COMMIT}
        assert set(checked) == {body for body in database if body.startswith(b"open-")}
